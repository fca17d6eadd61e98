/**
 * Global setup of the cli tests: build dist/cli.js from the current sources with the
 * project's own tsup config, so the tests spawn the CLI exactly as it is published.
 */
import { build } from 'tsup';
import configs from '../../tsup.config.js';

export default async function setup(): Promise<void> {
  const list = Array.isArray(configs) ? configs : [configs];
  const cli = list.find(
    (c) => typeof c === 'object' && c !== null && JSON.stringify(c.entry).includes('cli'),
  );
  if (!cli || typeof cli !== 'object') throw new Error('tsup.config.ts has no cli entry');
  await build({ ...cli, silent: true });
}

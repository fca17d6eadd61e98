/**
 * Global setup of the cli tests: build dist/cli.js (and the ESM chunks it shares with the library) from the current sources with the
 * project's own tsup config, so the tests spawn the CLI exactly as it is published.
 */
import { build } from 'tsup';
import configs from '../../tsup.config.js';

/** Once per run: several projects list this setup, and vitest runs each project's own copy. */
const built = Symbol.for('pgleaderlock.test.cliBuilt');

/**
 * Set by the compat driver once it has run `npm run build` itself: its components run side by
 * side, and one rebuilding dist/cli.js while another spawns it would race.
 */
export const CLI_BUILT_ENV = 'PGLEADERLOCK_TEST_CLI_BUILT';

export default async function setup(): Promise<void> {
  const g = globalThis as { [built]?: true };
  if (g[built] || process.env[CLI_BUILT_ENV] === '1') return;
  const list = Array.isArray(configs) ? configs : [configs];
  const cli = list.find(
    (c) => typeof c === 'object' && c !== null && JSON.stringify(c.entry).includes('cli'),
  );
  if (!cli || typeof cli !== 'object') throw new Error('tsup.config.ts has no cli entry');
  // the ESM build (the CLI shares its chunks with the library): no declarations, and the
  // rest of dist/ left in place
  await build({ ...cli, dts: false, clean: false, silent: true });
  g[built] = true;
}

/**
 * Global setup of the contract project: its pooler-refusal test runs a real PgBouncer, so
 * `npm test` installs it once if missing (as root, with apt-get), as the compat project's
 * setup does. A failure does not stop the run: that test then fails saying what to install.
 */
import { ensureTool, PGBOUNCER } from './debian-binary.js';

export default function setup(): void {
  try {
    ensureTool(PGBOUNCER, (line) => console.log(`[pgleaderlock tests] ${line}`));
  } catch (err) {
    console.error(`[pgleaderlock tests] ${(err as Error).message}`);
  }
}

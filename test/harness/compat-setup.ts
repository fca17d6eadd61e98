/**
 * Global setup of the compat project: install PgBouncer once if it is missing (as root,
 * with apt-get). A failure does not stop the run: the other components still run, and each
 * PgBouncer test fails with the message saying what to install.
 */
import { ensurePgBouncer } from './pgbouncer-binary.js';

export default function setup(): void {
  try {
    const binary = ensurePgBouncer((line) => console.log(`[compat] ${line}`));
    console.log(`[compat] PgBouncer: ${binary}`);
  } catch (err) {
    console.error(`[compat] ${(err as Error).message}`);
  }
}

/**
 * Global setup of the compat project: install PgBouncer and pgpool-II once if missing (as
 * root, with apt-get). A failure does not stop the run: the other components still run, and
 * each test of the missing tool fails with the message saying what to install.
 */
import { ensureTool, PGBOUNCER, PGPOOL } from './debian-binary.js';

export default function setup(): void {
  for (const tool of [PGBOUNCER, PGPOOL]) {
    try {
      const binary = ensureTool(tool, (line) => console.log(`[compat] ${line}`));
      console.log(`[compat] ${tool.label}: ${binary}`);
    } catch (err) {
      console.error(`[compat] ${(err as Error).message}`);
    }
  }
}

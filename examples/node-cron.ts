import cron from 'node-cron';
import pg from 'pg';
import { LeaderLock } from 'pgleaderlock';
import { leaderCoordinator } from 'pgleaderlock/node-cron';

/**
 * Run `report` every night at 03:00 on whichever replica leads, at most once per night
 * across all replicas. Returns a function that stops everything.
 */
export async function scheduleReport(
  connectionString: string,
  report: () => Promise<void>,
  { name = 'nightly-report', expression = '0 3 * * *' } = {},
): Promise<() => Promise<void>> {
  const lock = new LeaderLock({ name, connectionString, fencing: true }); // fencing: required
  const pool = new pg.Pool({ connectionString, max: 2 }); // claims are written through it
  const task = cron.schedule(expression, report, {
    name, // with the scheduled time, it names each fire: "nightly-report:2026-03-01T03:00:00.000Z"
    distributed: true,
    runCoordinator: leaderCoordinator(lock, { pool }),
  });
  await lock.start();
  return async () => {
    await task.destroy();
    await lock.shutdown();
    await pool.end();
  };
}

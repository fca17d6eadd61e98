import { setTimeout as sleep } from 'node:timers/promises';
import { LeaderLock } from 'pgleaderlock';

/** Join the election for (1, 100) and do leader-only work while leading, until `signal` aborts. */
export async function run(connectionString: string, signal: AbortSignal): Promise<void> {
  await using lock = new LeaderLock({ connectionString, key1: 1, key2: 100, signal });
  lock.onError((err) => console.error(`pgleaderlock: ${err.message}`));

  // Runs in every leadership term. `term.signal` aborts the moment leadership ends (lost,
  // released, connection failing); shutdown() and stepDown() wait for this to return
  // before they unlock.
  lock.runWhileLeader(async (term) => {
    console.log('leader: starting work');
    while (!term.signal.aborted) {
      console.log('leader-only work');
      await sleep(1000, undefined, { signal: term.signal }).catch(() => {});
    }
  });

  await lock.start(); // from here the process stays alive until shutdown
  await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
} // `await using`: shutdown() here ends the term, waits for the work, releases the lock

import { LeaderLock } from 'pgleaderlock';

/** Join the election for (1, 100) and do leader-only work while leading, until `signal` aborts. */
export async function run(connectionString: string, signal: AbortSignal): Promise<void> {
  await using lock = new LeaderLock({ connectionString, key1: 1, key2: 100, signal });

  let work: NodeJS.Timeout | undefined;
  const stopWork = () => clearInterval(work);
  lock.onAcquired(() => {
    console.log('leader: starting work');
    work = setInterval(() => console.log('leader-only work'), 1000);
  });
  lock.onLost(stopWork); // involuntary: stop at once
  lock.onReleased(stopWork); // voluntary: stepDown() or shutdown
  lock.onError((err) => console.error(`pgleaderlock: ${err.message}`));

  await lock.start();
  await lock.waitForLeadership({ timeoutMs: 10_000 });
  await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
} // `await using`: shutdown() here releases the lock and closes the connection

/**
 * A leader-only worker: run with `npx tsx examples/worker.ts` (PG* variables or
 * DATABASE_URL for the connection). Start it twice: one process works, the other waits and
 * takes over within milliseconds when the first stops (Ctrl-C) or dies.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaderLock, type Term } from 'pgleaderlock';

/** One unit of leader-only work; checks the term's signal before every side effect. */
async function tick(term: Term, n: number): Promise<void> {
  term.signal.throwIfAborted();
  console.log(`[term ${term.id}] tick ${n}`);
}

export async function runWorker(connectionString: string | undefined, signal: AbortSignal): Promise<void> {
  await using lock = new LeaderLock({
    name: 'example-worker',
    ...(connectionString ? { connectionString } : {}),
    signal,
  });
  lock.onError((err) => console.error(`pgleaderlock: ${err.message}`));
  lock.onStateChange((from, to) => console.log(`state ${from} -> ${to}`));

  // Runs in every term; the term's signal aborts the moment leadership ends, and
  // stepDown()/shutdown() wait for this function to return before they unlock.
  await using _work = lock.runWhileLeader(async (term) => {
    console.log(`leading: term ${term.id}`);
    for (let n = 1; !term.signal.aborted; n++) {
      await tick(term, n);
      await sleep(1000, undefined, { signal: term.signal }).catch(() => {});
    }
    console.log(`term ${term.id} over: ${String(term.signal.reason)}`);
  });

  await lock.start();
  await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const ac = new AbortController();
  process.once('SIGINT', () => ac.abort());
  process.once('SIGTERM', () => ac.abort());
  await runWorker(process.env.DATABASE_URL, ac.signal);
}

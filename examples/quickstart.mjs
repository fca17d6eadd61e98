import { setTimeout as sleep } from 'node:timers/promises';
import { LeaderLock } from 'pgleaderlock';

const lock = new LeaderLock({ name: 'nightly-report', connectionString: process.env.DATABASE_URL });

// Runs each time this process becomes leader; term.signal aborts the moment it stops being one.
lock.runWhileLeader(async (term) => {
  console.log(`leading (term ${term.id})`);
  while (!term.signal.aborted) {
    console.log('leader-only work'); // pass term.signal to anything that takes one
    await sleep(1000, undefined, { signal: term.signal }).catch(() => {});
  }
  console.log('no longer leading');
});

// SIGTERM (a deploy) or Ctrl-C: end the term, wait for the work, release the lock, exit.
for (const signal of ['SIGTERM', 'SIGINT']) process.once(signal, () => void lock.shutdown());

await lock.start(); // the process now stays up until shutdown(), through database outages

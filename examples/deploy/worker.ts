/**
 * The worker of docs/deploy.md (Kubernetes, systemd, PM2). Every replica joins the election
 * and serves /healthz, /readyz and /metrics; the leader runs `leaderWork`. SIGTERM
 * (Kubernetes, systemd) or SIGINT (PM2) ends the term, waits for the work, releases the lock
 * and exits; whatever the work does, the session is closed by force SHUTDOWN_TIMEOUT_MS after
 * the signal and the process exits right after. The same signal again exits at once.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { LeaderLock, type LeaderWork, probes } from 'pgleaderlock';

/** The longest stop: keep the platform's stop timeout above it (docs/deploy.md). */
export const SHUTDOWN_TIMEOUT_MS = 10_000;

/** Leader-only work: it returns soon after `term.signal` aborts. */
const leaderWork: LeaderWork = async (term) => {
  while (!term.signal.aborted) {
    console.log(`term ${term.id}: leader-only work`);
    await sleep(1000, undefined, { signal: term.signal }).catch(() => {});
  }
};

export async function main(work: LeaderWork = leaderWork): Promise<void> {
  const lock = new LeaderLock({ name: 'nightly-billing', connectionString: process.env.DATABASE_URL });
  lock.onError((err) => console.error(`pgleaderlock: ${err.message}`));
  lock.onAcquired((term) => console.log(`leading (term ${term.id})`));
  lock.onTakeoverFence(({ delayMs }) => console.log(`holding the lock, leading in ${delayMs} ms`));
  lock.runWhileLeader(work);

  // a follower is live and ready too; under PM2 each instance gets its own PROBES_PORT
  const server = http.createServer(probes(lock));
  server.listen(Number(process.env.PROBES_PORT ?? 9464), () => {
    console.log(`probes on port ${(server.address() as AddressInfo).port}`);
  });

  const stop = async (signal: NodeJS.Signals): Promise<void> => {
    console.log(`${signal}: shutting down`);
    await lock.shutdown({ timeoutMs: SHUTDOWN_TIMEOUT_MS }); // ends the term, waits for the work, unlocks
    server.close();
    process.exit(0);
  };
  process.once('SIGTERM', (signal) => void stop(signal));
  process.once('SIGINT', (signal) => void stop(signal));
  await lock.start();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();

/**
 * The leader side of bench/handoff-processes.ts, in a process of its own: a `LeaderLock`
 * that leads and steps down on command, or a bare `pg` holder that commits a `released`
 * event and unlocks (the proof-carrying pair's first half), or only unlocks (the limit).
 * Each moment is read on `process.hrtime` (the machine's monotonic clock, the same in every
 * process), so the parent can subtract it from its own.
 */
import pg from 'pg';
import { LeaderLock } from '../src/index.js';

export type LeaderCommand =
  | { type: 'lead'; url: string; key1: number; key2: number; mode: 'lock' | 'bare' | 'pair' }
  | { type: 'go' }
  | { type: 'exit' };
export type LeaderReport = { type: 'leading' } | { type: 'went'; at: number } | { type: 'done' };

const now = (): number => Number(process.hrtime.bigint()) / 1e6;
const send = (m: LeaderReport): void => {
  process.send?.(m);
};
let go: (() => Promise<void>) | null = null;

process.on('message', (m: LeaderCommand) => {
  void (async () => {
    if (m.type === 'exit') process.exit(0);
    if (m.type === 'go') {
      await go?.();
      return;
    }
    const { url, key1, key2, mode } = m;
    if (mode === 'lock') {
      const leader = new LeaderLock({
        connectionString: url,
        key1,
        key2,
        healthIntervalMs: 1000,
        queryTimeoutMs: 1000,
        autoReacquire: false,
      });
      leader.onError(() => {});
      await leader.start();
      await leader.waitForLeadership();
      go = async () => {
        const at = now();
        const stepped = leader.stepDown();
        send({ type: 'went', at });
        await stepped;
        await leader.shutdown();
        send({ type: 'done' });
      };
    } else {
      const holder = new pg.Client({ connectionString: url });
      holder.on('error', () => {});
      await holder.connect();
      await holder.query('SELECT pg_advisory_lock($1, $2)', [key1, key2]);
      const release =
        mode === 'pair'
          ? `BEGIN; SELECT pg_notify('pgleaderlock_bench', 'released'); COMMIT; SELECT pg_advisory_unlock(${key1}, ${key2})`
          : `SELECT pg_advisory_unlock(${key1}, ${key2})`;
      go = async () => {
        const at = now();
        const sent = holder.query(release);
        send({ type: 'went', at });
        await sent;
        await holder.end();
        send({ type: 'done' });
      };
    }
    send({ type: 'leading' });
  })();
});

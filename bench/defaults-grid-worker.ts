/**
 * A candidate in a process of its own for bench/defaults-grid.ts: a LeaderLock with every
 * option at its default except `healthIntervalMs` and `queryTimeoutMs` (so `serverReleaseMs`
 * follows them). argv[2]: JSON config. Optionally blocks its own event loop for `blockMs`
 * every 1–4 s (a synchronous sleep: nothing runs, not even timers or socket reads, as in a
 * long GC pause or a CPU-bound callback). Reports over IPC on the machine's monotonic clock
 * (comparable across processes): `ready`, `acquired` (the term opened), `lost`, `gap` (the
 * state is LEADER but `isLeader` reads false: the lease ran out unrenewed), `error`.
 */
import { LeaderLock } from '../src/index.js';

interface Config {
  url: string;
  key1: number;
  key2: number;
  id: string;
  healthIntervalMs: number;
  queryTimeoutMs: number;
  /** Block the event loop this long, every 1–4 s; 0 = never. */
  blockMs: number;
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as Config;
const now = (): number => Number(process.hrtime.bigint()) / 1e6;
const send = (ev: string, extra: Record<string, unknown> = {}): void => {
  if (process.connected)
    process.send?.({ ev, id: cfg.id, at: now(), ...extra }, undefined, undefined, () => {});
};

const lock = new LeaderLock({
  connectionString: cfg.url,
  key1: cfg.key1,
  key2: cfg.key2,
  id: cfg.id,
  healthIntervalMs: cfg.healthIntervalMs,
  queryTimeoutMs: cfg.queryTimeoutMs,
});
let lastError = '';
lock.onError((err) => {
  const e = err as Error & { code?: string };
  lastError = `${e.code ?? e.name}: ${e.message}`.slice(0, 300);
  send('error', { error: lastError });
});
lock.onAcquired((term) => send('acquired', { term: term.id, leaseMs: lock.safety?.leaseMs }));
lock.onLost(() => send('lost', { lastError }));

// isLeader sampled every 20 ms: false while the state is LEADER means the lease lapsed
let inGap = false;
setInterval(() => {
  const gap = lock.state === 'leader' && !lock.isLeader;
  if (gap && !inGap) send('gap', { lastError });
  inGap = gap;
}, 20);

if (cfg.blockMs > 0) {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const schedule = (): void => {
    setTimeout(
      () => {
        Atomics.wait(cell, 0, 0, cfg.blockMs); // the whole event loop stops for blockMs
        schedule();
      },
      1000 + Math.random() * 3000,
    );
  };
  schedule();
}

process.on('disconnect', () => {
  void lock.shutdown({ timeoutMs: 2000 }).finally(() => process.exit(0));
});
await lock.start();
send('ready');

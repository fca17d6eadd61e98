/**
 * Followers after a server restart, on a real server: a plain client holds the lock, F
 * followers (default options, wait or poll mode) queue behind it for WAIT_MS, the server
 * stops (fast) and starts again. Measured from the moment the server logged that it accepts
 * connections again (its own `%n` timestamp: the bench's event loop, shared with the
 * followers in one process, may read that line late): the first follower's grant
 * (`onTakeoverFence`'s moment: a grant after a restart has no proof of drain, so its term
 * opens after the 250 ms takeover delay), its term opening, and every follower's first
 * successful connection after the restart (their spread: no lockstep herd), each recorded
 * through the `connect` hook. With PROCESSES > 1 the followers run in that many child
 * processes (the production layout: one or a few candidates per process), each reporting
 * wall-clock times.
 * `npx tsx bench/restart-follow.ts [trials] [waitMs] [followers] [wait|poll] [processes]` (docs/safety.md).
 */
import { type ChildProcess, fork } from 'node:child_process';
import pg from 'pg';
import { startPgServer } from '../src/cli/embedded-pg.js';
import { ExponentialBackoff, LeaderLock } from '../src/index.js';

const outageMaxMs = Number(process.env.RESTART_FOLLOW_OUTAGE_MAX_MS ?? 0);

/** What a follower reports, at a wall-clock time (ms since the epoch, sub-ms precision). */
type Report = {
  kind: 'connected' | 'granted' | 'acquired' | 'error';
  at: number;
  what?: string;
  from?: number;
};
type Order =
  | { cmd: 'start'; url: string; key1: number; key2: number; count: number; mode: 'wait' | 'poll' }
  | { cmd: 'shutdown' }
  | { cmd: 'exit' };

const wallNow = (): number => performance.timeOrigin + performance.now();
const codes = (err: unknown): string => {
  const out: string[] = [];
  let last: unknown;
  for (let e = err, n = 0; e && typeof e === 'object' && n < 10; n++) {
    const code = (e as { code?: unknown }).code;
    out.push(typeof code === 'string' ? code : (e as Error).message?.slice(0, 30));
    last = e;
    e = (e as { cause?: unknown }).cause;
  }
  return `${out.join(' <- ')}: ${String((last as Error | undefined)?.message).slice(0, 40)}`;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `count` followers in this process; each report goes to `report`. */
async function startFollowers(
  order: Extract<Order, { cmd: 'start' }>,
  report: (i: number, r: Report) => void,
): Promise<() => Promise<void>> {
  const locks = Array.from({ length: order.count }, (_, i) => {
    const lock = new LeaderLock({
      key1: order.key1,
      key2: order.key2,
      acquireMode: order.mode,
      // RESTART_FOLLOW_OUTAGE_MAX_MS: the default strategy with another bound (the trade-off, docs/benchmarks.md)
      ...(outageMaxMs ? { retryStrategy: new ExponentialBackoff({ outageMaxMs }) } : {}),
      connect: async () => {
        const from = wallNow();
        const client = new pg.Client({ connectionString: order.url });
        client.on('error', () => {});
        await client.connect();
        report(i, { kind: 'connected', at: wallNow(), from });
        return client;
      },
    });
    // what the followers were told after the restart: codes of the error's cause chain
    lock.onError((e) => report(i, { kind: 'error', at: wallNow(), what: codes(e) }));
    lock.onTakeoverFence(() => report(i, { kind: 'granted', at: wallNow() }));
    lock.onAcquired(() => report(i, { kind: 'acquired', at: wallNow() }));
    return lock;
  });
  await Promise.all(locks.map((l) => l.start()));
  return async () => {
    await Promise.all(locks.map((l) => l.shutdown()));
  };
}

if (process.env.RESTART_FOLLOW_CHILD) {
  // a child process: followers on the parent's orders, reports sent back as they happen
  let shutdown: (() => Promise<void>) | null = null;
  const send = (m: unknown): void => {
    process.send?.(m);
  };
  process.on('message', async (order: Order) => {
    if (order.cmd === 'start') {
      shutdown = await startFollowers(order, (i, r) => send({ i, ...r }));
      send({ done: 'start' });
    } else if (order.cmd === 'shutdown') {
      await shutdown?.();
      send({ done: 'shutdown' });
    } else process.exit(0);
  });
  send({ done: 'ready' }); // orders sent before this listener existed would be lost
} else await main();

async function main(): Promise<void> {
  const TRIALS = Number(process.argv[2] ?? 5);
  const WAIT_MS = Number(process.argv[3] ?? 3000);
  const FOLLOWERS = Number(process.argv[4] ?? 1);
  const MODE = (process.argv[5] ?? 'wait') as 'wait' | 'poll';
  const PROCESSES = Math.min(FOLLOWERS, Number(process.argv[6] ?? 1));
  // the server's log lines carry its epoch time with milliseconds: "ready to accept" is the moment
  let readyAt = Number.NaN;
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]): boolean => {
    const text = String(chunk);
    const m = /^(\d{10}\.\d{3}) .*ready to accept connections/m.exec(text);
    if (m) readyAt = Number(m[1]) * 1000;
    if (/^\d{10}\.\d{3} /.test(text)) return true; // the server's own log: not shown
    return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stderr.write;
  const server = await startPgServer({ verbose: true, settings: { log_line_prefix: '%n ' } });
  const children: ChildProcess[] = [];
  const grants: number[] = [];
  const terms: number[] = [];
  const reconnects: number[][] = [];
  const downtimes: number[] = [];
  const lateReads: number[] = [];
  let onReport: (i: number, r: Report) => void = () => {};
  const pending = new Map<ChildProcess, () => void>();
  const ready: Promise<void>[] = [];
  for (let p = 0; p < (PROCESSES > 1 ? PROCESSES : 0); p++) {
    const child = fork(new URL(import.meta.url).pathname, [], {
      env: { ...process.env, RESTART_FOLLOW_CHILD: '1' },
    });
    child.on('message', (m: { i: number; done?: string } & Report) => {
      if (m.done) pending.get(child)?.();
      else onReport(m.i + p * FOLLOWERS, m); // a follower's number, unique across children
    });
    children.push(child);
    ready.push(new Promise<void>((resolve) => pending.set(child, resolve)));
  }
  await Promise.all(ready);
  const tell = (order: Order): Promise<unknown> =>
    Promise.all(
      children.map(
        (c) =>
          new Promise<void>((resolve) => {
            pending.set(c, resolve);
            c.send(order);
          }),
      ),
    );
  try {
    for (let trial = 0; trial < TRIALS; trial++) {
      const key1 = 4242;
      const key2 = trial;
      const holder = new pg.Client({ connectionString: server.url });
      holder.on('error', () => {});
      await holder.connect();
      await holder.query('SELECT pg_advisory_lock($1, $2)', [key1, key2]);
      let grantedAt = 0;
      let acquiredAt = 0;
      let upAt = Number.POSITIVE_INFINITY;
      const firstAfterUp = new Map<number, number>();
      const connects: { i: number; at: number }[] = [];
      const errorsAfterUp = new Map<string, number>();
      const startedAfterUp: number[] = []; // when each connect that succeeded was begun
      onReport = (i, r) => {
        if (r.kind === 'granted' && grantedAt === 0) grantedAt = r.at;
        if (r.kind === 'acquired' && acquiredAt === 0) acquiredAt = r.at;
        if (r.kind === 'connected') connects.push({ i, at: r.at });
        if (r.kind === 'connected' && (r.from ?? 0) >= upAt) startedAfterUp.push(r.from as number);
        if (r.kind === 'error' && r.at >= upAt)
          errorsAfterUp.set(r.what ?? '', (errorsAfterUp.get(r.what ?? '') ?? 0) + 1);
      };
      const start = { url: server.url, key1, key2, mode: MODE };
      let shutdown: () => Promise<unknown>;
      if (PROCESSES > 1) {
        // FOLLOWERS spread over the children as evenly as they go
        await Promise.all(
          children.map(
            (c, p) =>
              new Promise<void>((resolve) => {
                pending.set(c, resolve);
                const count = Math.floor(FOLLOWERS / PROCESSES) + (p < FOLLOWERS % PROCESSES ? 1 : 0);
                c.send({ cmd: 'start', ...start, count });
              }),
          ),
        );
        shutdown = () => tell({ cmd: 'shutdown' });
      } else {
        shutdown = await startFollowers({ cmd: 'start', ...start, count: FOLLOWERS }, (i, r) =>
          onReport(i, r),
        );
      }
      await sleep(WAIT_MS);
      const stopAt = wallNow();
      await server.stop('fast');
      readyAt = Number.NaN;
      await server.start();
      lateReads.push(wallNow() - readyAt);
      upAt = Number.isNaN(readyAt) ? wallNow() : readyAt;
      downtimes.push(upAt - stopAt);
      const firstConnects = (): Map<number, number> => {
        for (const c of connects) {
          if (c.at >= upAt && !firstAfterUp.has(c.i)) firstAfterUp.set(c.i, c.at - upAt);
        }
        return firstAfterUp;
      };
      const deadline = wallNow() + 60_000;
      while ((acquiredAt === 0 || firstConnects().size < FOLLOWERS) && wallNow() < deadline) await sleep(1);
      grants.push((grantedAt || acquiredAt) - upAt);
      terms.push(acquiredAt - upAt);
      reconnects.push([...firstConnects().values()]);
      // the schedule's part (the first successful connect begun after accepting) and the set-up's
      const firstStart = Math.min(...startedAfterUp) - upAt;
      const connected = connects.find((c) => c.at >= upAt)?.at ?? Number.NaN;
      console.log(
        `trial ${trial + 1}: first connect that succeeded begun ${firstStart.toFixed(0)} ms after accepting; first connection ${(connected - upAt).toFixed(0)} ms; ${startedAfterUp.filter((t) => t < upAt + 500).length} begun in the first 500 ms`,
      );
      if (errorsAfterUp.size > 0)
        console.log(`trial ${trial + 1}: errors after accepting:`, Object.fromEntries(errorsAfterUp));
      await shutdown();
      await holder.end().catch(() => {});
    }
  } finally {
    for (const c of children) c.send({ cmd: 'exit' });
    await server.dispose();
  }
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  const at = (s: number[], q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
  const fmt = (xs: number[]): string => {
    const s = sorted(xs);
    return `p50 ${at(s, 0.5).toFixed(0)} ms (${s.map((x) => x.toFixed(0)).join(', ')})`;
  };
  const layout = PROCESSES > 1 ? `in ${PROCESSES} processes` : 'in one process';
  console.log(
    `${MODE} mode, ${FOLLOWERS} follower(s) ${layout}, trials ${TRIALS}, waited ${WAIT_MS} ms before the restart, node ${process.version}`,
  );
  console.log(`stop -> accepting again (the restart itself): ${fmt(downtimes)}`);
  console.log(`the server's "ready" line read by the bench after: ${fmt(lateReads)}`);
  console.log(`server accepting -> first grant: ${fmt(grants)}`);
  console.log(`server accepting -> term open: ${fmt(terms)}`);
  if (FOLLOWERS > 1) {
    for (const [i, r] of reconnects.entries()) {
      const s = sorted(r);
      // distinct 10 ms slots among the reconnects, and the busiest slot: a herd shows as few slots, one of them crowded
      const slots = new Map<number, number>();
      for (const x of s) slots.set(Math.floor(x / 10), (slots.get(Math.floor(x / 10)) ?? 0) + 1);
      console.log(
        `trial ${i + 1}: reconnects after accepting: first ${at(s, 0).toFixed(0)}, p50 ${at(s, 0.5).toFixed(0)}, p90 ${at(s, 0.9).toFixed(0)}, last ${at(s, 1).toFixed(0)} ms; ${slots.size} distinct 10 ms slots, busiest ${Math.max(...slots.values())}`,
      );
    }
  }
}

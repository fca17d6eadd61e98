/**
 * Followers after a server restart, on a real server: a plain client holds the lock, F
 * followers (default options, wait or poll mode) queue behind it for WAIT_MS, the server
 * stops (fast) and starts again. Measured from the moment the server logged that it accepts
 * connections again (its own `%n` timestamp: the bench's event loop, shared with the
 * followers in one process, may read that line late): the first follower's grant
 * (`onTakeoverFence`'s moment: a grant after a restart has no proof of drain, so its term
 * opens after the 250 ms takeover delay), its term opening, and every follower's first
 * successful connection after the restart (their spread: no lockstep herd), each recorded
 * from `pg.Client` (the followers use the default `connect`), with the statements each
 * connection sent (a breakdown: when the connect began, how long it took, the set-up until
 * the lock was asked for).
 * With PROCESSES > 1 the followers run in that many child processes (the production layout:
 * one or a few candidates per process), each reporting wall-clock times.
 * Each trial is followed by one of the floor (bench/restart-floor.ts: as many bare `pg`
 * clients in the same layout, connecting every 10 ms, asking for the lock once connected):
 * the two interleaved, under the same load. RESTART_FOLLOW_FLOOR=0 runs the lock alone.
 * `npx tsx bench/restart-follow.ts [trials] [waitMs] [followers] [wait|poll] [processes]` (docs/safety.md).
 */
import { type ChildProcess, fork } from 'node:child_process';
import os from 'node:os';
import pg from 'pg';
import { startPgServer } from '../src/cli/embedded-pg.js';
import { ExponentialBackoff, LeaderLock } from '../src/index.js';
import { type Report, recordStatements, startBare, wallNow } from './restart-floor.js';
import { type Kind, print, type Trial } from './restart-table.js';

const outageMaxMs = Number(process.env.RESTART_FOLLOW_OUTAGE_MAX_MS ?? 0);
const FLOOR = process.env.RESTART_FOLLOW_FLOOR !== '0';

type Order =
  | {
      cmd: 'start';
      kind: Kind;
      url: string;
      key1: number;
      key2: number;
      count: number;
      mode: 'wait' | 'poll';
    }
  | { cmd: 'shutdown' }
  | { cmd: 'exit' };

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

/**
 * The lock's own connections, seen from `pg.Client`: the followers use the default `connect`
 * (its deadline, its abandon), named `rf<i>x` (application_name), and each attempt, its
 * connection and its statements are reported to that follower's `report`.
 */
const reporters = new Map<number, (r: Report) => void>();
const attempts = new Map<number, number>();
const clientConnect = pg.Client.prototype.connect as (this: pg.Client, ...args: unknown[]) => unknown;
pg.Client.prototype.connect = function (this: pg.Client, ...args: unknown[]) {
  const params = (this as unknown as { connectionParameters?: { application_name?: string } })
    .connectionParameters;
  const i = Number(/rf(\d+)x/.exec(params?.application_name ?? '')?.[1] ?? Number.NaN);
  const report = reporters.get(i);
  if (!report || args.length > 0) return clientConnect.apply(this, args);
  const n = (attempts.get(i) ?? 0) + 1;
  attempts.set(i, n);
  const from = wallNow();
  report({ kind: 'attempt', at: from, n });
  return (clientConnect.call(this) as Promise<void>).then(() => {
    report({ kind: 'connected', at: wallNow(), from, n });
    recordStatements(this, n, report);
  });
} as typeof pg.Client.prototype.connect;

/** `count` followers in this process; each report goes to `report`. */
async function startFollowers(
  order: Extract<Order, { cmd: 'start' }>,
  report: (i: number, r: Report) => void,
): Promise<() => Promise<void>> {
  if (order.kind === 'floor') return startBare(order, report);
  reporters.clear();
  attempts.clear();
  const locks = Array.from({ length: order.count }, (_, i) => {
    reporters.set(i, (r) => report(i, r));
    const lock = new LeaderLock({
      key1: order.key1,
      key2: order.key2,
      id: `rf${i}x`,
      acquireMode: order.mode,
      // RESTART_FOLLOW_OUTAGE_MAX_MS: the default strategy with another bound (the trade-off, docs/benchmarks.md)
      ...(outageMaxMs ? { retryStrategy: new ExponentialBackoff({ outageMaxMs }) } : {}),
      connectionString: order.url,
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
  const loadAtStart = os.loadavg();
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

  const trial = async (kind: Kind, key2: number): Promise<Trial> => {
    const key1 = 4242;
    const holder = new pg.Client({ connectionString: server.url });
    holder.on('error', () => {});
    await holder.connect();
    await holder.query('SELECT pg_advisory_lock($1, $2)', [key1, key2]);
    let grantedAt = 0;
    let acquiredAt = 0;
    let upAt = Number.POSITIVE_INFINITY;
    const reports: { i: number; r: Report }[] = [];
    onReport = (i, r) => {
      reports.push({ i, r });
      if (r.kind === 'granted' && grantedAt === 0) grantedAt = r.at;
      if (r.kind === 'acquired' && acquiredAt === 0) acquiredAt = r.at;
    };
    const start = { url: server.url, key1, key2, mode: MODE, kind };
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
      shutdown = await startFollowers({ cmd: 'start', ...start, count: FOLLOWERS }, (i, r) => onReport(i, r));
    }
    await sleep(WAIT_MS);
    const stopAt = wallNow();
    await server.stop('fast');
    readyAt = Number.NaN;
    await server.start();
    const lateRead = wallNow() - readyAt;
    upAt = Number.isNaN(readyAt) ? wallNow() : readyAt;
    // each follower's first connection after accepting that it used (sent a statement on:
    // the lock abandons a connect at its deadline, and the hook's client may connect later)
    const first = new Map<number, Report>();
    const used = new Set<string>();
    let seen = 0;
    const firstConnects = (): Map<number, Report> => {
      for (; seen < reports.length; seen++) {
        const { i, r } = reports[seen] as { i: number; r: Report };
        if (r.kind === 'sent') used.add(`${i}:${r.n}`);
      }
      for (const { i, r } of reports) {
        if (r.kind === 'connected' && r.at >= upAt && !first.has(i) && used.has(`${i}:${r.n}`))
          first.set(i, r);
      }
      return first;
    };
    const deadline = wallNow() + 60_000;
    while ((acquiredAt === 0 || firstConnects().size < FOLLOWERS) && wallNow() < deadline) await sleep(1);
    await sleep(50); // the statements under way
    await shutdown();
    await holder.end().catch(() => {});
    const of = (i: number, n: number | undefined, kinds: Report['kind'], what: (w?: string) => boolean) =>
      reports.find(({ i: j, r }) => j === i && r.n === n && r.kind === kinds && what(r.what))?.r.at ??
      Number.NaN;
    const t: Trial = {
      downtime: upAt - stopAt,
      lateRead,
      attemptsPerSecondDown:
        reports.filter(({ r }) => r.kind === 'attempt' && r.at >= stopAt && r.at < upAt).length /
        ((upAt - stopAt) / 1000),
      grant: (grantedAt || acquiredAt) - upAt,
      term: acquiredAt - upAt,
      begun: [],
      connected: [],
      firstStatement: [],
      lockAsked: [],
      begunFirst500: reports.filter(({ r }) => r.kind === 'attempt' && r.at >= upAt && r.at < upAt + 500)
        .length,
      failedAfterUp: 0,
      path: [],
      errors: new Map(),
    };
    for (const [i, c] of firstConnects()) {
      t.begun.push((c.from ?? Number.NaN) - upAt);
      t.connected.push(c.at - upAt);
      t.firstStatement.push(of(i, c.n, 'statement', () => true) - upAt);
      t.lockAsked.push(of(i, c.n, 'sent', (w) => w === 'wait-lock' || w === 'try-lock') - upAt);
    }
    t.failedAfterUp = reports.filter(
      ({ i, r }) => r.kind === 'attempt' && r.at >= upAt && !used.has(`${i}:${r.n}`),
    ).length;
    // the first grant's path: the connection it came on (the last on which that follower asked for the lock before it)
    const asked = reports.filter(
      ({ r }) =>
        r.kind === 'sent' &&
        (r.what === 'wait-lock' || r.what === 'try-lock') &&
        r.at <= (grantedAt || acquiredAt),
    );
    const g = reports.find(({ r }) => r.kind === 'granted' && r.at === grantedAt)?.i;
    const last = asked.filter(({ i }) => i === g).at(-1)?.r;
    const conn = reports.find(({ i, r }) => i === g && r.kind === 'connected' && r.n === last?.n)?.r;
    t.path = [
      (conn?.from ?? Number.NaN) - upAt,
      (conn?.at ?? Number.NaN) - upAt,
      of(g ?? -1, last?.n, 'statement', () => true) - upAt,
      (last?.at ?? Number.NaN) - upAt,
      t.grant,
    ];
    for (const { r } of reports) {
      if (r.kind === 'error' && r.at >= upAt)
        t.errors.set(r.what ?? '', (t.errors.get(r.what ?? '') ?? 0) + 1);
    }
    return t;
  };

  const results: Record<Kind, Trial[]> = { lock: [], floor: [] };
  try {
    for (let n = 0; n < TRIALS; n++) {
      for (const kind of FLOOR ? (['lock', 'floor'] as const) : (['lock'] as const)) {
        const t = await trial(kind, n * 2 + (kind === 'floor' ? 1 : 0));
        results[kind].push(t);
        console.log(
          `trial ${n + 1} ${kind} [load ${(os.loadavg()[0] ?? 0).toFixed(1)}]: restart ${t.downtime.toFixed(0)} ms; attempts ${t.attemptsPerSecondDown.toFixed(0)}/s while down; first grant ${t.grant.toFixed(0)} ms (its connect begun, connected, 1st answer, lock asked: ${t.path
            .slice(0, 4)
            .map((x) => x.toFixed(0))
            .join(
              ', ',
            )}); ${t.begunFirst500} connects begun in the first 500 ms, ${t.failedAfterUp} failed after accepting`,
        );
        if (t.errors.size > 0) console.log('  errors after accepting:', Object.fromEntries(t.errors));
      }
    }
  } finally {
    for (const c of children) c.send({ cmd: 'exit' });
    await server.dispose();
  }
  print(results, { TRIALS, WAIT_MS, FOLLOWERS, MODE, PROCESSES, loadAtStart });
}

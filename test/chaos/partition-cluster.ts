/**
 * PartitionedLeadership workers, each a process of its own (test/harness/workers.ts `forkWorker`),
 * optionally each behind a fault proxy of its own, and what they report: the runs of each
 * partition on the shared monotonic clock (process.hrtime). Faults on one worker: SIGKILL, a
 * clean leave, `pg_terminate_backend` of its ownership session, a freeze (busy loop), a
 * blackhole of its connections. Used by test/chaos/partitions.test.ts and partition-chaos.ts.
 */

import type { ChildProcess } from 'node:child_process';
import { keysOf } from '../../src/partitions/sql.js';
import { adminQuery, eventually } from '../harness/db.js';
import { type FaultProxy, startFaultProxy } from '../harness/fault-proxy.js';
import { overlapsOf } from '../harness/overlaps.js';
import type { RunReport } from '../harness/partition-runs.js';
import type { ChildWorkerCommand } from '../harness/worker-options.js';
import { forkWorker } from '../harness/workers.js';

/** A report of a worker (test/fixtures/partition-worker.fixture.ts); `at`: for an `end`, when the run ended, bounded by its lease. */
export interface WorkerMsg extends RunReport {
  ev: 'start' | 'end' | 'ready' | 'stats' | 'error';
  /** On a `start`: the term opened past its lease. */
  late?: boolean;
  /** On an `end`: when the work stopped (`at` is earlier if its lease ended first). */
  stopped?: number;
  stats?: { statements: number };
  owned?: number;
  message?: string;
}

/** One run of partition `p` in worker `id`, from `start` to `end` (Infinity: still going). */
export interface Run {
  p: number;
  id: string;
  start: number;
  end: number;
  late: boolean;
}

export interface ClusterOptions {
  url: string;
  name: string;
  partitions: number;
  takeoverDelayMs: number;
  /** The work stops this long after its term aborts (default 0). */
  stopMs?: number;
  healthIntervalMs?: number;
  queryTimeoutMs?: number;
  /** Each worker connects through a fault proxy of its own (needed for `blackhole`). */
  proxied?: boolean;
  /** Those proxies drop protocol CancelRequests, as RDS Proxy does (implies `proxied`). */
  dropCancels?: boolean;
  /** Called with each process forked (e.g. useChildren's `track`). */
  track?: (proc: ChildProcess) => void;
}

interface Worker {
  id: string;
  proc: ChildProcess;
  proxy: FaultProxy | null;
  /** Its first reconcile done (or it exited first). */
  ready: Promise<void>;
  exited: Promise<void>;
}

export const now = (): number => Number(process.hrtime.bigint()) / 1e6;
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export type PartitionCluster = ReturnType<typeof partitionCluster>;

export function partitionCluster(o: ClusterOptions) {
  const msgs: WorkerMsg[] = [];
  /** Workers that are members or joining (not leaving, not killed). */
  const procs = new Map<string, ChildProcess>();
  const all = new Map<string, Worker>();
  /** When each killed worker was SIGKILLed: its runs ended then. */
  const killed = new Map<string, number>();
  /** When each process was seen to exit (its sockets are closed by then, so the server has freed its locks). */
  const exitedAt = new Map<string, number>();
  /** partition → id of the worker whose run is going (kept as reports arrive: polled often). */
  const going = new Map<number, string>();
  let runEvents = 0;
  const record = (m: WorkerMsg): void => {
    msgs.push(m);
    if (m.p === undefined || killed.has(m.id)) return;
    if (m.ev === 'start') going.set(m.p, m.id);
    else if (m.ev === 'end' && going.get(m.p) === m.id) going.delete(m.p);
    runEvents += 1;
  };
  let n = 0;

  const spawn = async (): Promise<string> => {
    const id = `w${n++}`;
    const target = new URL(o.url);
    const proxy =
      o.proxied || o.dropCancels
        ? await startFaultProxy(
            { host: target.hostname, port: Number(target.port) },
            { dropCancels: o.dropCancels === true },
          )
        : null;
    const proc = forkWorker({
      options: {
        connectionString: proxy ? proxy.url(o.url) : o.url,
        name: o.name,
        partitions: o.partitions,
        id,
        takeoverDelayMs: o.takeoverDelayMs,
        ...(o.healthIntervalMs ? { healthIntervalMs: o.healthIntervalMs } : {}),
        ...(o.queryTimeoutMs ? { queryTimeoutMs: o.queryTimeoutMs } : {}),
      },
      stopMs: o.stopMs ?? 0,
    });
    let isReady = (): void => {};
    const ready = new Promise<void>((resolve) => {
      isReady = resolve;
    });
    proc.on('message', (m: WorkerMsg) => {
      record(m);
      if (m.ev === 'ready') isReady();
    });
    o.track?.(proc);
    const exited = new Promise<void>((resolve) =>
      proc.once('exit', () => {
        exitedAt.set(id, now());
        resolve();
      }),
    ).then(() => {
      isReady();
      return proxy?.close();
    });
    procs.set(id, proc);
    all.set(id, { id, proc, proxy, ready, exited });
    return id;
  };

  const command = (id: string, cmd: ChildWorkerCommand): void => {
    const proc = all.get(id)?.proc;
    if (proc?.connected) proc.send(cmd);
  };

  const kill = (id: string): void => {
    killed.set(id, now());
    for (const [p, holder] of going) if (holder === id) going.delete(p); // a dead process runs nothing
    all.get(id)?.proc.kill('SIGKILL');
    procs.delete(id);
  };

  /**
   * A clean leave (PartitionedLeadership.shutdown), resolved when the process exited. A
   * worker still joining leaves once it has joined (a command sent before the fixture
   * listens would be lost).
   */
  const stop = async (id: string): Promise<void> => {
    const w = all.get(id);
    if (!w) return;
    procs.delete(id);
    await w.ready;
    command(id, 'shutdown');
    await w.exited;
  };

  /** pg_terminate_backend of the worker's ownership session. */
  const terminate = (id: string): Promise<unknown> =>
    adminQuery(
      o.url,
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pgleaderlock:' || $1 || '#p' || $2",
      [id, o.partitions],
    );

  /**
   * Freeze the worker for `ms` (once it has joined): its event loop busy (`busy`, the
   * default), or the whole process stopped (`sigstop`: SIGSTOP, then SIGCONT after `ms`).
   */
  const freeze = async (id: string, ms: number, how: 'busy' | 'sigstop' = 'busy'): Promise<void> => {
    const w = all.get(id);
    await w?.ready;
    if (how === 'busy') return command(id, { type: 'freeze', ms });
    if (!w || w.proc.exitCode !== null || w.proc.signalCode !== null) return;
    w.proc.kill('SIGSTOP');
    setTimeout(() => {
      if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGCONT');
    }, ms);
  };

  const proxyOf = (id: string): FaultProxy => {
    const proxy = all.get(id)?.proxy;
    if (!proxy) throw new Error(`worker ${id} has no fault proxy (proxied: true)`);
    return proxy;
  };
  /** Bytes stop in both directions on the worker's connections; sockets stay open. */
  const blackhole = (id: string): void => proxyOf(id).blackhole();
  /**
   * The network is back: the connections the worker gave up on meanwhile are reset (their
   * peer's kernel would answer the next packet with RST; the proxy's own kernel answers the
   * server's keepalives, so without this the server would keep them), new ones pass.
   */
  const heal = (id: string): void => {
    const proxy = proxyOf(id);
    proxy.reset();
    proxy.pass();
  };

  /** partition → id of the worker whose run is going (a killed worker's runs ended at its kill). */
  const running = (): Map<number, string> => new Map(going);

  /** Live workers → how many partitions each runs. */
  const perWorker = (): Map<string, number> => {
    const per = new Map<string, number>();
    for (const id of going.values()) per.set(id, (per.get(id) ?? 0) + 1);
    return per;
  };

  /** Every partition runs, on the live workers, ⌊P/N⌋ or ⌈P/N⌉ each. */
  const isBalanced = (): boolean => {
    const per = perWorker();
    const k = procs.size;
    const fair = (x: number) => x === Math.floor(o.partitions / k) || x === Math.ceil(o.partitions / k);
    return going.size === o.partitions && per.size === k && [...per.values()].every(fair);
  };

  /** Wait until balanced, and (`quietMs`) no run started or ended for that long. */
  const balanced = (what: string, timeoutMs = 60_000, quietMs = 0): Promise<void> => {
    let seen = -1;
    let since = 0;
    return eventually(
      () => {
        if (!isBalanced()) return false;
        if (runEvents !== seen) [seen, since] = [runEvents, now()];
        return now() - since >= quietMs;
      },
      { timeoutMs, intervalMs: 20, what },
    ).catch((err: Error) => {
      const errors = msgs.filter((m) => m.ev === 'error').slice(-3);
      throw new Error(
        `${err.message}; live ${[...procs.keys()].join(',')}; running per worker: ${JSON.stringify([...perWorker()])}; last errors: ${JSON.stringify(errors)}`,
      );
    });
  };

  /** Every run reported so far; a killed worker's runs end at its kill, the others' still going at Infinity. */
  const runs = (): Run[] => {
    const out: Run[] = [];
    const open = new Map<string, Run>();
    for (const m of msgs) {
      if (m.p === undefined) continue;
      const key = `${m.id}:${m.p}`;
      if (m.ev === 'start') {
        const run = { p: m.p, id: m.id, start: m.at, end: Number.POSITIVE_INFINITY, late: m.late === true };
        open.set(key, run);
        out.push(run);
      } else if (m.ev === 'end') {
        const run = open.get(key);
        if (run) run.end = m.at;
        open.delete(key);
      }
    }
    for (const run of open.values()) run.end = killed.get(run.id) ?? run.end;
    return out;
  };

  /** Stop every worker cleanly (its runs report their end), then close the proxies; SIGKILL what lingers. */
  const close = async (graceMs = 10_000): Promise<void> => {
    const left = [...all.values()];
    for (const w of left) if (procs.has(w.id)) void stop(w.id);
    const timer = setTimeout(() => {
      for (const w of left)
        if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGKILL');
    }, graceMs);
    await Promise.all(left.map((w) => w.exited));
    clearTimeout(timer);
  };

  return {
    msgs,
    procs,
    killed,
    exitedAt,
    spawn,
    kill,
    stop,
    terminate,
    freeze,
    blackhole,
    heal,
    running,
    perWorker,
    isBalanced,
    balanced,
    runs,
    close,
  };
}

/** How many partition locks of `name` the server says are held. */
export async function heldPartitions(url: string, name: string): Promise<number> {
  const [row] = await adminQuery<{ n: number }>(
    url,
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::int4::oid`,
    [keysOf(name).partitions],
  );
  return row?.n ?? 0;
}

/** Two workers' runs of one partition at once: `b` started while `a` still ran. */
export interface RunOverlap {
  p: number;
  a: string;
  b: string;
  /** When b started. */
  at: number;
  ms: number;
}

/** Every pair of runs of one partition in different workers that overlap in time (harness/overlaps.ts). */
export function findRunOverlaps(runs: readonly Run[]): RunOverlap[] {
  return overlapsOf(
    runs,
    (r) => r.id,
    (r) => r.p,
  ).map(({ a, b, at, ms }) => ({ p: a.p, a: a.id, b: b.id, at, ms }));
}

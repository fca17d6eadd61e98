/**
 * What `pgleaderlock demo` and `demo --partitions` share: the server (an embedded
 * PostgreSQL, or --dsn), the children (this very CLI run again, `run --json` or
 * `partition-worker`, each printing one JSON object a line that the demo reads), Ctrl-C and
 * the keys on a terminal, and the finish: every child stopped (SIGTERM, SIGKILL after 5 s),
 * the embedded server stopped and its data removed, then the summary.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { redact, resolveDsn, type Values } from './args.js';
import { findBinaries } from './binaries.js';
import { checkConnection, humanMs } from './common.js';
import { type PgServer, startPgServer } from './embedded-pg.js';

/** One line of a child's `--json` output. */
export type ChildEvent = { event?: string } & Record<string, unknown>;

export interface Child {
  readonly id: string;
  readonly proc: ChildProcess;
  readonly exited: Promise<void>;
}

/** The wall-clock time of day, to the millisecond, at the start of each demo line. */
export const clock = (): string => new Date().toISOString().slice(11, 23);

/** `--name`, else `demo-<random>`. */
export const demoName = (values: Values): string =>
  typeof values.name === 'string' ? values.name : `demo-${randomBytes(4).toString('hex')}`;

/** `min 8.1 ms, median 8.6 ms, max 9.2 ms`. */
export function spread(times: readonly number[]): string {
  const sorted = [...times].sort((a, b) => a - b);
  const mid = sorted.length / 2;
  const median =
    sorted.length % 2 === 1
      ? (sorted[Math.floor(mid)] ?? 0)
      : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
  return `min ${sorted[0]?.toFixed(1)} ms, median ${median.toFixed(1)} ms, max ${sorted.at(-1)?.toFixed(1)} ms`;
}

export class DemoHost {
  /** The children still running (a killed one stays until its exit is seen). */
  readonly children = new Map<string, Child>();
  /** Set once finish() began: no more kills, spawns or timers. */
  finishing = false;
  /** Resolves with the exit code once everything is stopped. */
  readonly done: Promise<number>;
  private resolveDone: (code: number) => void = () => {};
  private unlisten: () => void = () => {};
  private summary: () => void = () => {};
  private readonly timers = new Set<NodeJS.Timeout>();

  private constructor(
    /** Where the children connect (passed in their environment, not on a command line). */
    readonly url: string,
    private readonly server: PgServer | null,
  ) {
    this.done = new Promise<number>((r) => {
      this.resolveDone = r;
    });
  }

  /** Start the embedded server (fetching its binaries if needed), or check --dsn answers. */
  static async open(values: Values, write: (line: string) => void): Promise<DemoHost> {
    if (typeof values.dsn === 'string') {
      const dsn = resolveDsn(values);
      await checkConnection(dsn);
      write(`using ${redact(dsn.url)}`);
      return new DemoHost(dsn.url ?? '', null);
    }
    const packageDir = await findBinaries({ download: values['no-download'] !== true, say: write });
    const t0 = performance.now();
    const server = await startPgServer({ packageDir, osUser: 'existing' });
    write(
      `PostgreSQL (embedded, nothing to install) on ${server.host}:${server.port}, started in ${humanMs(performance.now() - t0)}`,
    );
    return new DemoHost(server.url, server);
  }

  /**
   * SIGINT and SIGTERM finish with 130 and 143; `summary` is printed last whatever ends the
   * demo. On a terminal, also keys: `q` quits (exit 0), Ctrl-C is SIGINT, and each of
   * `keys`. Returns whether keys are read (stdin is a terminal).
   */
  listen(keys: Record<string, () => void>, summary: () => void): boolean {
    this.summary = summary;
    const onSignal = (signal: NodeJS.Signals): void => {
      void this.finish(signal === 'SIGINT' ? 130 : 143);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    const stdin = process.stdin;
    const interactive = stdin.isTTY === true;
    const onKey = (data: Buffer): void => {
      const key = data.toString('utf8');
      if (key === 'q') void this.finish(0);
      else if (key === '\u0003') onSignal('SIGINT');
      else keys[key]?.();
    };
    if (interactive) {
      stdin.setRawMode(true);
      stdin.on('data', onKey);
      stdin.resume();
    }
    this.unlisten = () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      if (!interactive) return;
      stdin.off('data', onKey);
      stdin.setRawMode(false);
      stdin.pause();
    };
    return interactive;
  }

  /**
   * Run `pgleaderlock <args>` (this CLI) as a child with the database in `PG_DSN` and an IPC
   * channel (the child leaves when it closes, so a demo killed with SIGKILL leaves no
   * child). Each JSON line on its stdout goes to `onEvent`; its stderr is the demo's.
   */
  spawn(
    id: string,
    args: readonly string[],
    onEvent: (e: ChildEvent) => void,
    onExit: (code: number | null, signal: NodeJS.Signals | null) => void,
  ): Child {
    const proc = spawn(process.execPath, [...process.execArgv, process.argv[1] ?? '', ...args], {
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
      env: { ...process.env, PG_DSN: this.url },
    });
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    const child: Child = { id, proc, exited };
    this.children.set(id, child);
    proc.once('exit', (code, signal) => {
      this.children.delete(id);
      onExit(code, signal);
    });
    createInterface({ input: proc.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      let e: ChildEvent;
      try {
        e = JSON.parse(line) as ChildEvent;
      } catch {
        return;
      }
      onEvent(e);
    });
    return child;
  }

  /** Call `fn` after `ms`, unless the demo finishes first. */
  later(ms: number, fn: () => void): NodeJS.Timeout {
    const t = setTimeout(() => {
      this.timers.delete(t);
      fn();
    }, ms);
    this.timers.add(t);
    return t;
  }

  cancel(t: NodeJS.Timeout | undefined): void {
    if (t === undefined) return;
    clearTimeout(t);
    this.timers.delete(t);
  }

  /** Stop every child and the embedded server, print the summary, resolve `done`. Once. */
  async finish(code: number): Promise<void> {
    if (this.finishing) return;
    this.finishing = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.unlisten();
    const all = [...this.children.values()];
    for (const c of all) c.proc.kill('SIGTERM');
    const forced = setTimeout(() => {
      for (const c of all) c.proc.kill('SIGKILL');
    }, 5000);
    await Promise.all(all.map((c) => c.exited));
    clearTimeout(forced);
    await this.server?.dispose();
    this.summary();
    this.resolveDone(code);
  }
}

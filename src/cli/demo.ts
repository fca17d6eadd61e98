/**
 * `pgleaderlock demo`: an election you can watch. Starts PostgreSQL (embedded, unless
 * --dsn), runs N `pgleaderlock run` candidates as child processes, kills the leader with
 * SIGKILL at intervals (or on a key press), replaces it with a new candidate, and prints how
 * long each failover took: from the kill to the next leader's `acquired` line, on this
 * process's monotonic clock (so it includes the pipe from the candidate, well under 1 ms).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import {
  type OptionSpec,
  optionalDuration,
  positiveInt,
  redact,
  resolveDsn,
  UsageError,
  type Values,
} from './args.js';
import { findBinaries } from './binaries.js';
import { checkConnection, EXIT, humanMs } from './common.js';
import { type PgServer, startPgServer } from './embedded-pg.js';

export const DEMO_OPTIONS: OptionSpec[] = [
  {
    name: 'candidates',
    type: 'string',
    value: 'N',
    default: '3',
    help: 'how many candidates compete (>= 2)',
  },
  {
    name: 'interval',
    type: 'string',
    value: 'DURATION',
    default: '3s',
    help: 'kill the leader this long after it is elected',
  },
  {
    name: 'failovers',
    type: 'string',
    value: 'N',
    default: 'until Ctrl-C',
    help: 'stop after N failovers (exit 0)',
  },
  {
    name: 'acquire-mode',
    type: 'string',
    value: 'wait|poll',
    default: 'wait',
    help: 'the candidates’ acquisition mode',
  },
  {
    name: 'takeover-delay',
    type: 'string',
    value: 'DURATION',
    default: '250ms',
    help: 'the candidates’ takeover fence after an unclean handover (a SIGKILL is one); 0: off',
  },
  { name: 'no-download', type: 'boolean', help: 'never download PostgreSQL binaries; fail instead' },
];

interface Candidate {
  id: string;
  proc: ChildProcess;
  state: string;
  exited: Promise<void>;
}

const clock = (): string => new Date().toISOString().slice(11, 23);

export async function demo(values: Values, write: (line: string) => void): Promise<number> {
  const count = positiveInt(values, 'candidates', 3);
  if (count < 2) throw new UsageError(`--candidates must be at least 2 for a failover, received ${count}`);
  const intervalMs = optionalDuration(values, 'interval') ?? 3000;
  const failovers = values.failovers === undefined ? Infinity : positiveInt(values, 'failovers', 1);
  const mode = values['acquire-mode'] ?? 'wait';
  if (mode !== 'wait' && mode !== 'poll') {
    throw new UsageError(`--acquire-mode must be wait or poll, received ${JSON.stringify(mode)}`);
  }
  const name = typeof values.name === 'string' ? values.name : `demo-${randomBytes(4).toString('hex')}`;
  const fenceMs = optionalDuration(values, 'takeover-delay') ?? 250;

  let server: PgServer | null = null;
  let url: string;
  if (typeof values.dsn === 'string') {
    const dsn = resolveDsn(values);
    await checkConnection(dsn);
    url = dsn.url ?? '';
    write(`using ${redact(url)}`);
  } else {
    const packageDir = await findBinaries({ download: values['no-download'] !== true, say: write });
    const t0 = performance.now();
    server = await startPgServer({ packageDir, osUser: 'existing' });
    url = server.url;
    write(
      `PostgreSQL (embedded, nothing to install) on ${server.host}:${server.port}, started in ${humanMs(performance.now() - t0)}`,
    );
  }

  const candidates = new Map<string, Candidate>();
  const times: number[] = [];
  let nextNumber = 1;
  let leader: Candidate | null = null;
  let killedAt: number | null = null;
  let killTimer: NodeJS.Timeout | undefined;
  let finishing = false;
  let resolveDone: (code: number) => void = () => {};
  const done = new Promise<number>((r) => (resolveDone = r));

  const view = (): string => {
    const waiting = [...candidates.values()].filter((c) => c !== leader).map((c) => c.id);
    return `waiting: ${waiting.length ? waiting.join(', ') : 'none'}`;
  };

  const spawnCandidate = (): void => {
    const id = `candidate-${nextNumber++}`;
    const args = [
      ...process.execArgv,
      process.argv[1] ?? '',
      'run',
      '--json',
      '--name',
      name,
      '--id',
      id,
      '--health-interval',
      '1s',
      '--retry-base',
      '100ms',
      '--retry-max',
      '1s',
      '--acquire-mode',
      mode,
      '--takeover-delay',
      `${fenceMs}ms`,
    ];
    // the connection string goes in the environment, not on a command line others can read
    const proc = spawn(process.execPath, args, {
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
      env: { ...process.env, PG_DSN: url },
    });
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    const c: Candidate = { id, proc, state: 'starting', exited };
    candidates.set(id, c);
    proc.once('exit', () => {
      candidates.delete(id);
      if (leader === c) leader = null;
      if (!finishing) spawnCandidate(); // keep N candidates
    });
    createInterface({ input: proc.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      let e: { event?: string; to?: string };
      try {
        e = JSON.parse(line) as { event?: string; to?: string };
      } catch {
        return;
      }
      if (e.event === 'state' && e.to) c.state = e.to;
      if (e.event === 'takeover_fence') {
        write(`${clock()}  ${c.id} holds the lock; leads after the takeover fence (${humanMs(fenceMs)})`);
      }
      if (e.event === 'acquired') onLeader(c);
    });
  };

  const onLeader = (c: Candidate): void => {
    // a candidate may still win while the others stop: no more kills (nor a timer keeping us up)
    if (finishing) return;
    leader = c;
    if (killedAt !== null) {
      const ms = performance.now() - killedAt;
      killedAt = null;
      times.push(ms);
      write(`${clock()}  ${c.id} leads after ${ms.toFixed(1)} ms   ${view()}`);
      if (times.length >= failovers) {
        void finish(EXIT.OK);
        return;
      }
    } else {
      write(`${clock()}  ${c.id} leads   ${view()}`);
    }
    scheduleKill(intervalMs);
  };

  const scheduleKill = (delayMs: number): void => {
    clearTimeout(killTimer);
    if (finishing || !Number.isFinite(delayMs)) return;
    killTimer = setTimeout(killLeader, delayMs);
  };

  const killLeader = (): void => {
    if (finishing || !leader || killedAt !== null) return;
    // kill only once a successor waits: otherwise we would time a process start-up
    const successor = [...candidates.values()].some((c) => c !== leader && c.state === 'acquiring');
    if (!successor && mode === 'wait') {
      scheduleKill(50);
      return;
    }
    const victim = leader;
    write(`${clock()}  SIGKILL ${victim.id} (pid ${victim.proc.pid})`);
    killedAt = performance.now();
    victim.proc.kill('SIGKILL');
  };

  const finish = async (code: number): Promise<void> => {
    if (finishing) return;
    finishing = true;
    clearTimeout(killTimer);
    stopKeys();
    const all = [...candidates.values()];
    for (const c of all) c.proc.kill('SIGTERM');
    const forced = setTimeout(() => {
      for (const c of all) c.proc.kill('SIGKILL');
    }, 5000);
    await Promise.all(all.map((c) => c.exited));
    clearTimeout(forced);
    await server?.dispose();
    if (times.length > 0) {
      const sorted = [...times].sort((a, b) => a - b);
      const mid = sorted.length / 2;
      const median =
        sorted.length % 2 === 1
          ? (sorted[Math.floor(mid)] ?? 0)
          : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
      write(
        `${times.length} failover${times.length === 1 ? '' : 's'}, kill -> new leader: min ${sorted[0]?.toFixed(1)} ms, median ${median.toFixed(1)} ms, max ${sorted.at(-1)?.toFixed(1)} ms (${mode} mode)`,
      );
    }
    resolveDone(code);
  };

  const onSignal = (signal: NodeJS.Signals): void => {
    void finish(signal === 'SIGINT' ? 130 : 143);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  // keys: k kills the leader now, q (or Ctrl-C) quits; only on a terminal
  const stdin = process.stdin;
  const onKey = (data: Buffer): void => {
    const key = data.toString('utf8');
    if (key === 'k') killLeader();
    else if (key === 'q') void finish(EXIT.OK);
    else if (key === '\u0003') onSignal('SIGINT');
  };
  const interactive = stdin.isTTY === true;
  if (interactive) {
    stdin.setRawMode(true);
    stdin.on('data', onKey);
    stdin.resume();
  }
  function stopKeys(): void {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (!interactive) return;
    stdin.off('data', onKey);
    stdin.setRawMode(false);
    stdin.pause();
  }

  write(
    `${count} candidates compete for the lock "${name}" (${mode} mode); the leader is killed with SIGKILL ${humanMs(intervalMs)} after it wins${Number.isFinite(failovers) ? `, ${failovers} time${failovers === 1 ? '' : 's'}` : ''}.${interactive ? ' Keys: [k] kill the leader now, [q] quit.' : ' Ctrl-C stops.'}`,
  );
  try {
    for (let i = 0; i < count; i++) spawnCandidate();
  } catch (err) {
    await finish(EXIT.USAGE);
    throw err;
  }
  return done;
}

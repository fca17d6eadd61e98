/**
 * `pgleaderlock demo`: an election you can watch. Starts PostgreSQL (embedded, unless
 * --dsn), runs N `pgleaderlock run` candidates as child processes, kills the leader with
 * SIGKILL at intervals (or on a key press), replaces it with a new candidate, and prints how
 * long each failover took: from the kill to the next leader's `acquired` line, on this
 * process's monotonic clock (so it includes the pipe from the candidate, well under 1 ms).
 */
import { type OptionSpec, optionalDuration, positiveInt, UsageError, type Values } from './args.js';
import { EXIT, humanMs } from './common.js';
import { type Child, clock, DemoHost, demoName, spread } from './demo-common.js';
import { demoPartitions } from './demo-partitions.js';

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
    name: 'partitions',
    type: 'string',
    value: 'P',
    help: 'show partitioned leadership instead: the candidates are workers sharing P partitions (1 to 4096)',
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
    help: 'the candidates’ takeover delay after an unclean handover (a SIGKILL is one); 0: off',
  },
  { name: 'no-download', type: 'boolean', help: 'never download PostgreSQL binaries; fail instead' },
];

interface Candidate extends Child {
  state: string;
}

export async function demo(values: Values, write: (line: string) => void): Promise<number> {
  if (values.partitions !== undefined) return demoPartitions(values, write);
  const count = positiveInt(values, 'candidates', 3);
  if (count < 2) throw new UsageError(`--candidates must be at least 2 for a failover, received ${count}`);
  const intervalMs = optionalDuration(values, 'interval') ?? 3000;
  const failovers = values.failovers === undefined ? Infinity : positiveInt(values, 'failovers', 1);
  const mode = values['acquire-mode'] ?? 'wait';
  if (mode !== 'wait' && mode !== 'poll') {
    throw new UsageError(`--acquire-mode must be wait or poll, received ${JSON.stringify(mode)}`);
  }
  const name = demoName(values);
  const delayMs = optionalDuration(values, 'takeover-delay') ?? 250;
  const host = await DemoHost.open(values, write);

  const candidates = host.children as Map<string, Candidate>;
  const times: number[] = [];
  let nextNumber = 1;
  let leader: Candidate | null = null;
  let killedAt: number | null = null;
  let killTimer: NodeJS.Timeout | undefined;
  let deferredSpawns = 0;

  const view = (): string => {
    const waiting = [...candidates.values()].filter((c) => c !== leader).map((c) => c.id);
    return `waiting: ${waiting.length ? waiting.join(', ') : 'none'}`;
  };

  const spawnCandidate = (): void => {
    const id = `candidate-${nextNumber++}`;
    const args = [
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
      `${delayMs}ms`,
    ];
    const c: Candidate = Object.assign(
      host.spawn(
        id,
        args,
        (e) => {
          if (e.event === 'state' && typeof e.to === 'string') c.state = e.to;
          if (e.event === 'takeover_delay') {
            write(`${clock()}  ${c.id} holds the lock; leads after the takeover delay (${humanMs(delayMs)})`);
          }
          if (e.event === 'acquired') onLeader(c);
        },
        () => {
          if (leader === c) leader = null;
          if (host.finishing) return;
          // keep N candidates, but start the replacement only once the failover is timed: a
          // Node start-up takes a core for ~100 ms, which the successor needs on a small machine
          if (killedAt !== null && candidates.size > 0) deferredSpawns++;
          else spawnCandidate();
        },
      ),
      { state: 'starting' },
    );
  };

  const onLeader = (c: Candidate): void => {
    // a candidate may still win while the others stop: no more kills (nor a timer keeping us up)
    if (host.finishing) return;
    leader = c;
    if (killedAt !== null) {
      const ms = performance.now() - killedAt;
      killedAt = null;
      times.push(ms);
      write(`${clock()}  ${c.id} leads after ${ms.toFixed(1)} ms   ${view()}`);
      if (times.length >= failovers) {
        void host.finish(EXIT.OK);
        return;
      }
      for (; deferredSpawns > 0; deferredSpawns--) spawnCandidate();
    } else {
      write(`${clock()}  ${c.id} leads   ${view()}`);
    }
    scheduleKill(intervalMs);
  };

  const scheduleKill = (delayMs: number): void => {
    host.cancel(killTimer);
    if (host.finishing || !Number.isFinite(delayMs)) return;
    killTimer = host.later(delayMs, killLeader);
  };

  const killLeader = (): void => {
    if (host.finishing || !leader || killedAt !== null) return;
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

  const summary = (): void => {
    if (times.length === 0) return;
    write(
      `${times.length} failover${times.length === 1 ? '' : 's'}, kill -> new leader: ${spread(times)} (${mode} mode)`,
    );
  };
  // keys: k kills the leader now, q (or Ctrl-C) quits; only on a terminal
  const interactive = host.listen({ k: killLeader }, summary);
  write(
    `${count} candidates compete for the lock "${name}" (${mode} mode); the leader is killed with SIGKILL ${humanMs(intervalMs)} after it wins${Number.isFinite(failovers) ? `, ${failovers} time${failovers === 1 ? '' : 's'}` : ''}.${interactive ? ' Keys: [k] kill the leader now, [q] quit.' : ' Ctrl-C stops.'}`,
  );
  try {
    for (let i = 0; i < count; i++) spawnCandidate();
  } catch (err) {
    await host.finish(EXIT.USAGE);
    throw err;
  }
  return host.done;
}

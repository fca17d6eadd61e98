/**
 * A worker process for bench/partitions.ts: either a PartitionedLeadership, or (the peer:
 * what users do without it) one LeaderLock per partition. argv[2]: JSON config. Reports over
 * IPC on the machine's monotonic clock: `start` and `end` of each partition's run, `stats`.
 */
import { FixedInterval, LeaderLock, PartitionedLeadership } from '../src/index.js';

interface Config {
  url: string;
  name: string;
  partitions: number;
  id: string;
  kind: 'partitioned' | 'per-partition';
  healthIntervalMs: number;
}
const cfg = JSON.parse(process.argv[2] ?? '{}') as Config;
const now = (): number => Number(process.hrtime.bigint()) / 1e6;
const send = (m: Record<string, unknown>): void => {
  if (process.connected) process.send?.({ id: cfg.id, at: now(), ...m });
};
const untilAborted = (signal: AbortSignal): Promise<void> =>
  new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));

let statements = (): number => 0;
let stop: () => Promise<void>;
if (cfg.kind === 'partitioned') {
  const w = new PartitionedLeadership({
    connectionString: cfg.url,
    name: cfg.name,
    partitions: cfg.partitions,
    id: cfg.id,
    takeoverDelayMs: 0,
    healthIntervalMs: cfg.healthIntervalMs,
  });
  w.runForEach(async (p, term) => {
    send({ ev: 'start', p });
    await untilAborted(term.signal);
    send({ ev: 'end', p });
  });
  statements = () => w.stats().statements;
  stop = () => w.shutdown({ timeoutMs: 5000 });
  await w.start();
} else {
  const locks = Array.from({ length: cfg.partitions }, (_, p) => {
    const lock = new LeaderLock({
      connectionString: cfg.url,
      name: `${cfg.name}/${p}`,
      id: `${cfg.id}-${p}`,
      takeoverDelayMs: 0,
      healthIntervalMs: cfg.healthIntervalMs,
      retryStrategy: new FixedInterval({ intervalMs: 1000 }),
    });
    lock.runWhileLeader(async (term) => {
      send({ ev: 'start', p });
      await untilAborted(term.signal);
      send({ ev: 'end', p });
    });
    return lock;
  });
  // a LeaderLock does not count its statements: one check per interval per held lock, one
  // statement per wait slice per waiting lock (estimated from the states)
  statements = () => 0;
  stop = async () => {
    await Promise.all(locks.map((l) => l.shutdown({ timeoutMs: 5000 })));
  };
  await Promise.all(locks.map((l) => l.start()));
}
process.on('message', (cmd: string) => {
  if (cmd === 'stats') send({ ev: 'stats', statements: statements() });
  if (cmd === 'shutdown') void stop().then(() => process.exit(0));
});
process.on('disconnect', () => void stop().then(() => process.exit(0)));
send({ ev: 'ready' });

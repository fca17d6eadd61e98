/** What PartitionedLeadership logs, against PostgreSQL: membership, takes, revocations, a lost session, errors. */
import { expect, it } from 'vitest';
import type { LogFields, Logger } from '../../src/index.js';
import { adminQuery, databaseUrl, eventually, waitingWatches } from '../harness/db.js';
import { partitionWorker } from '../harness/workers.js';

const uniq = () => `plog-${Date.now()}-${Math.random().toString(36).slice(2, 7)}`;

function capture(): { logger: Logger; lines: (LogFields & { level: string })[] } {
  const lines: (LogFields & { level: string })[] = [];
  const at =
    (level: string) =>
    (fields: LogFields): void => {
      lines.push({ level, ...fields });
    };
  return { logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, lines };
}

/** The harness's worker, 8 partitions, a 100 ms takeover delay. */
const worker = (name: string, id: string, logger?: Logger) =>
  partitionWorker({ name, partitions: 8, id, takeoverDelayMs: 100, ...(logger ? { logger } : {}) });

const terminateWorker = (id: string) =>
  adminQuery(
    databaseUrl(),
    'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
    [`pgleaderlock:${id}#p8`],
  );

it('logs membership changes, takes (with their fence), revocations (with their reason), a dead member and its own lost session', async () => {
  const name = uniq();
  const { logger, lines } = capture();
  const a = worker(name, 'la', logger);
  await a.start();
  expect(await a.waitForBalance({ timeoutMs: 5000 })).toBe(true);
  const events = () => lines.map((l) => `${l.level} ${String(l.event)}`);
  expect(lines[0]).toMatchObject({
    level: 'info',
    event: 'members_changed',
    members: ['la'],
    name,
    id: 'la',
  });
  expect(lines.find((l) => l.event === 'partitions_taken')).toMatchObject({
    level: 'info',
    partitions: [0, 1, 2, 3, 4, 5, 6, 7],
  });

  const b = worker(name, 'lb');
  await b.start();
  await eventually(() => a.owned.size === 4 && b.owned.size === 4, { what: 'a 4/4 split' });
  expect(lines).toContainEqual(expect.objectContaining({ event: 'members_changed', members: ['la', 'lb'] }));
  const rebalance = lines.find((l) => l.event === 'partitions_revoked');
  expect(rebalance).toMatchObject({ level: 'info', reason: 'rebalance' });
  expect(rebalance?.partitions).toHaveLength(4);

  // b's session is terminated: a sees it die and takes b's share under the fence. a's ring
  // watch must be queued on b's member lock first: b, back at once after its terminate,
  // rejoins before a's next reconcile, so only the watch sees the death (once in CI, the
  // terminate came before the watch had queued, and no death was ever logged)
  await eventually(async () => (await waitingWatches(databaseUrl(), 'la')).length === 1, {
    what: 'a’s ring watch to wait on b',
  });
  lines.length = 0;
  await terminateWorker('lb');
  await eventually(() => lines.some((l) => l.event === 'member_died'), { what: 'a to log the death' });
  expect(lines.find((l) => l.event === 'member_died')).toMatchObject({ level: 'warn', member: 'lb' });
  // under the takeover delay (100 ms), unless b, back at once, proved its drain before the
  // take (then without it: delayMs 0)
  await eventually(() => lines.some((l) => l.event === 'partitions_taken'), { what: "a to take b's share" });
  expect([0, 100]).toContain(lines.find((l) => l.event === 'partitions_taken')?.delayMs);
  await b.shutdown();

  // a's own session is terminated: its terms end as lost, and it comes back
  // alone, and known to be: b, back at once after its terminate, may have joined just before it left
  const members = () => lines.filter((l) => l.event === 'members_changed').at(-1)?.members;
  await eventually(() => a.owned.size === 8 && JSON.stringify(members()) === '["la"]', {
    what: 'a alone again',
  });
  lines.length = 0;
  await terminateWorker('la');
  await eventually(() => a.owned.size === 8 && lines.some((l) => l.event === 'partitions_taken'), {
    what: 'a back after its session was lost',
  });
  expect(events().slice(0, 2)).toEqual(['warn session_lost', 'warn partitions_revoked']);
  expect(lines[1]).toMatchObject({ reason: 'lost', partitions: [0, 1, 2, 3, 4, 5, 6, 7] });
  expect(lines.find((l) => l.event === 'error')).toMatchObject({ level: 'error', name, id: 'la' });

  lines.length = 0;
  await a.shutdown();
  expect(lines.find((l) => l.event === 'partitions_revoked')).toMatchObject({
    level: 'info',
    reason: 'shutdown',
  });
  expect(events()).not.toContain('warn session_lost');
});

it('a logger that throws changes nothing: the worker owns its partitions and shuts down cleanly', async () => {
  const name = uniq();
  const boom = () => {
    throw new Error('logger down');
  };
  const w = worker(name, 'lt', { debug: boom, info: boom, warn: boom, error: boom });
  await w.start();
  expect(await w.waitForBalance({ timeoutMs: 5000 })).toBe(true);
  expect(w.owned.size).toBe(8);
  await w.shutdown();
  expect(w.owned.size).toBe(0);
});

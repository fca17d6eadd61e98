/**
 * README and docs/partitions.md: "two connections per worker whatever the partition count
 * (plus one per standby host listed)". Counted on each server of a replicated cluster of its
 * own in pg_stat_activity, by the workers' ids in their application_name: with only the
 * primary listed, and with every host listed (the peer watch keeps one connection to each
 * other host), for 1 and 1,024 partitions; and again after an outage of the primary, whose
 * surveys find only standbys (each one used to keep its standby connections open).
 */
import { isDeepStrictEqual } from 'node:util';
import { expect, it } from 'vitest';
import type { PartitionedLeadership } from '../../src/index.js';
import { type ClusterNode, startCluster } from '../harness/cluster.js';
import { eventually, testTag } from '../harness/db.js';
import { partitionWorker } from '../harness/workers.js';

const N = 3;
const HEALTH_MS = 200;

/** node name → worker id → its backends there. */
type Counts = Record<string, Record<string, number>>;

/** The backends of the workers whose ids start with `tag`, per node and per worker (application_name `pgleaderlock:<id>#…`). */
async function count(nodes: readonly ClusterNode[], tag: string): Promise<Counts> {
  const out: Counts = {};
  for (const n of nodes) {
    const rows = await n.query<{ id: string; n: number }>(
      `SELECT split_part(substr(application_name, length('pgleaderlock:') + 1), '#', 1) AS id, count(*)::int AS n
         FROM pg_stat_activity WHERE application_name LIKE $1 GROUP BY 1`,
      [`pgleaderlock:${tag}-%`],
    );
    out[n.name] = Object.fromEntries(rows.map((r) => [r.id, r.n]));
  }
  return out;
}

/** Where `got` differs from `expected`, in words (`more`: only where it has more). */
function deviations(got: Counts, expected: Counts, more = false): string[] {
  return Object.entries(expected).flatMap(([node, ids]) =>
    [...new Set([...Object.keys(ids), ...Object.keys(got[node] ?? {})])]
      .filter((id) => (more ? (got[node]?.[id] ?? 0) > (ids[id] ?? 0) : got[node]?.[id] !== ids[id]))
      .map((id) => `${node} ${id}: ${got[node]?.[id] ?? 0}, not ${ids[id] ?? 0}`),
  );
}

/** Wait until the server lists exactly `expected`. */
async function exactly(
  nodes: readonly ClusterNode[],
  tag: string,
  expected: Counts,
  what: string,
): Promise<void> {
  let last: Counts = {};
  await eventually(
    async () => {
      last = await count(nodes, tag);
      return isDeepStrictEqual(last, expected);
    },
    { what, timeoutMs: 15_000 },
  ).catch((err: Error) => {
    throw new Error(`${err.message}: ${deviations(last, expected).join('; ')}`);
  });
}

/** 2 on the primary for each worker, 1 on each standby for those that list it. */
function claimed(
  p: ClusterNode,
  standbys: readonly ClusterNode[],
  workers: { id: string; all: boolean }[],
): Counts {
  const out: Counts = Object.fromEntries([p, ...standbys].map((n) => [n.name, {}]));
  for (const w of workers) {
    (out[p.name] as Record<string, number>)[w.id] = 2;
    if (w.all) for (const s of standbys) (out[s.name] as Record<string, number>)[w.id] = 1;
  }
  return out;
}

it('exactly two connections per worker on the primary, whatever P (1 or 1,024), and exactly one more per standby host listed, on that standby; never more over 5 health intervals', async () => {
  await using cluster = await startCluster({ standbys: 2 });
  const [p, s1, s2] = cluster.nodes as [ClusterNode, ClusterNode, ClusterNode];
  const tag = testTag();
  const groups: { all: boolean; partitions: number; workers: PartitionedLeadership[] }[] = [];
  for (const all of [false, true]) {
    for (const partitions of [1, 1024]) {
      const workers = Array.from({ length: N }, (_, i) =>
        partitionWorker({
          name: `conns-${tag}-${all ? 'all' : 'one'}-${partitions}`,
          partitions,
          id: `${tag}-${all ? 'h3' : 'h1'}p${partitions}w${i}`,
          connectionString: all ? cluster.url() : cluster.url([p]),
          healthIntervalMs: HEALTH_MS,
          takeoverDelayMs: 0,
        }),
      );
      await Promise.all(workers.map((w) => w.start()));
      groups.push({ all, partitions, workers });
    }
  }
  const workers = groups.flatMap((g) => g.workers.map((w) => ({ w, id: w.id, all: g.all })));
  await eventually(
    async () =>
      (await Promise.all(workers.map(({ w }) => w.waitForBalance({ timeoutMs: 50 })))).every(Boolean),
    { what: 'every group balanced', timeoutMs: 20_000 },
  );
  const expected = claimed(p, [s1, s2], workers);
  // the peer watch connects on its first round, one health interval after the join
  await exactly(cluster.nodes, tag, expected, 'the claimed counts');
  // over 5 health intervals (reconciles, peer rounds): never a connection beyond the claim
  // (a peer probe past its 250 ms deadline on a loaded machine reconnects: one fewer a moment)
  const samples: Counts[] = [];
  for (let i = 0; i < 10; i++) {
    samples.push(await count(cluster.nodes, tag));
    await new Promise((r) => setTimeout(r, HEALTH_MS / 2));
  }
  expect(
    samples.flatMap((got, i) => deviations(got, expected, true).map((d) => `sample ${i}: ${d}`)),
  ).toEqual([]);
  await exactly(cluster.nodes, tag, expected, 'the claimed counts, again');
  const per = (node: ClusterNode, all: boolean) =>
    workers.filter((x) => x.all === all).map((x) => samples[0]?.[node.name]?.[x.id] ?? 0);
  console.log(
    `[partitions connections] per worker (P 1 and 1,024, ${N} workers each): primary listed alone: ${per(p, false).join(',')} on the primary; all three listed: ${per(p, true).join(',')} on the primary, ${per(s1, true).join(',')} on ${s1.name}, ${per(s2, true).join(',')} on ${s2.name}; samples off the claim: ${samples.filter((got) => deviations(got, expected).length > 0).length} of ${samples.length}`,
  );
  await Promise.all(workers.map(({ w }) => w.shutdown()));
  await exactly(cluster.nodes, tag, claimed(p, [s1, s2], []), 'no connection left');
}, 60_000);

it('after an outage of the primary (its surveys meanwhile find only the standby) each worker again has exactly two connections on the primary and one on the standby: no survey leaves its standby connection open', async () => {
  await using cluster = await startCluster({ standbys: 1 });
  const [p, s] = cluster.nodes as [ClusterNode, ClusterNode];
  const tag = testTag();
  const workers = Array.from({ length: N }, (_, i) =>
    partitionWorker({
      name: `conns-outage-${tag}`,
      partitions: 8,
      id: `${tag}-w${i}`,
      connectionString: cluster.url(),
      healthIntervalMs: HEALTH_MS,
      takeoverDelayMs: 0,
    }),
  );
  const errors: string[] = [];
  for (const w of workers) w.onError((err) => errors.push((err as { code?: string }).code ?? err.message));
  await Promise.all(workers.map((w) => w.start()));
  const expected = claimed(
    p,
    [s],
    workers.map((w) => ({ id: w.id, all: true })),
  );
  await exactly(cluster.nodes, tag, expected, 'the claimed counts');

  await p.stop('fast');
  // 3 s without a primary: the workers try again on their back-off (100 ms doubling), and
  // each survey finds only the standby
  let most = 0;
  const until = performance.now() + 3000;
  while (performance.now() < until) {
    const on = (await count([s], tag))[s.name] ?? {};
    most = Math.max(most, ...Object.values(on), 0);
    await new Promise((r) => setTimeout(r, 50));
  }
  const noPrimary = errors.filter((e) => e === 'ERR_PGLEADERLOCK_NO_PRIMARY').length;
  await p.start();
  await exactly(cluster.nodes, tag, expected, 'the claimed counts after the outage');
  console.log(
    `[partitions connections] primary down 3 s: ${noPrimary} surveys found only the standby; at most ${most} connections of one worker on the standby meanwhile; after it: 2 on the primary and 1 on the standby each`,
  );
  expect(noPrimary).toBeGreaterThanOrEqual(N);
  // a survey's connection, and for a moment the peer watch's, closing as the session ends
  expect(most).toBeLessThanOrEqual(2);
}, 60_000);

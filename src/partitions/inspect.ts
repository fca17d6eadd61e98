/**
 * `PartitionedLeadership.inspect()`: the members of a name and the owner of every
 * partition, from `pg_locks` on the primary, without joining. A snapshot (informational).
 */
import type pg from 'pg';
import { type Clock, systemClock } from '../core/clock.js';
import type { ConnectFn } from '../core/connect.js';
import { Connection } from '../core/connection.js';
import { type Endpoint, endpointsOf } from '../core/endpoints.js';
import { connectFound, findPrimaryOnly } from '../core/primary.js';
import { hookEndpoints } from '../core/shared-options.js';
import { keysOf, type MemberRow, OWNERS, parseMember, RECONCILE } from './sql.js';

/** Options of `PartitionedLeadership.inspect()`: where, and which group. */
export interface PartitionInspectOptions {
  /** As for `PartitionedLeadership`, several hosts included (the primary among them is inspected). */
  connectionString?: string;
  /** Options for the default `pg.Client` (not with `connect`). */
  clientConfig?: Omit<pg.ClientConfig, 'connectionString'>;
  /** Opens a connected client; inspect closes it. */
  connect?: ConnectFn | readonly ConnectFn[];
  /** The group's name, as its workers give it. */
  name: string;
  /** The group's partition count, as its workers give it. */
  partitions: number;
  /** Connect and query deadline (default 5000). */
  timeoutMs?: number;
  /** Time source (default `performance.now()` and the global timers). */
  clock?: Clock;
}

/** What `PartitionedLeadership.inspect()` found: the members, and the owner of each partition. */
export interface PartitionInspection {
  /** The server inspected (`host:port` of the primary, or `connect()`). */
  host: string;
  /** Members (holders of a member lock), by id; `partitions` is the count each runs with. */
  members: {
    /** The worker's id. */
    id: string;
    /** Its member session's backend pid. */
    pid: number;
    /** The partition count it runs with (a mismatch with `partitions` shows here). */
    partitions: number;
    /** How many partitions it owns now. */
    owned: number;
  }[];
  /** For each partition, the id of its owner, or null when nobody holds it. */
  owners: (string | null)[];
}

export async function inspectPartitions(o: PartitionInspectOptions): Promise<PartitionInspection> {
  const timeoutMs = o.timeoutMs ?? 5000;
  const endpoints: Endpoint[] = o.connect
    ? hookEndpoints(o.connect)
    : endpointsOf(o, 'pgleaderlock-inspect', timeoutMs);
  const clock = o.clock ?? systemClock;
  const found = await findPrimaryOnly(endpoints, { clock, queryTimeoutMs: timeoutMs });
  const conn = await Connection.open(connectFound(found), {
    clock,
    queryTimeoutMs: timeoutMs,
    closeTimeoutMs: 1000,
    unref: false,
  });
  try {
    const keys = keysOf(o.name);
    const [row] = await conn.query<{ members: { app: string | null; slot: string; pid: number }[] }>(
      RECONCILE,
      [keys.members, keys.partitions, ''], // no marker: not a member session
    );
    const members = (row?.members ?? [])
      .map((m) => parseMember(m.app, Number(m.slot), m.pid))
      .filter((m): m is MemberRow => m !== null)
      .sort((a, b) => (a.id < b.id ? -1 : 1));
    const byPid = new Map(members.map((m) => [m.pid, m.id]));
    const owners: (string | null)[] = Array.from({ length: o.partitions }, () => null);
    const held = await conn.query<{ partition: number; pid: number }>(OWNERS, [keys.partitions]);
    for (const h of held) {
      if (h.partition >= 0 && h.partition < o.partitions)
        owners[h.partition] = byPid.get(h.pid) ?? `pid ${h.pid}`;
    }
    return {
      host: found.endpoint.label,
      members: members.map((m) => ({
        id: m.id,
        pid: m.pid,
        partitions: m.partitions,
        owned: owners.filter((x) => x === m.id).length,
      })),
      owners,
    };
  } finally {
    await conn.close();
  }
}

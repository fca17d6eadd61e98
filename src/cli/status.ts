/** `pgleaderlock status`: who holds the key and who waits, from pg_locks. Informational. */

import { destroyClient } from '../core/connect.js';
import type { Found } from '../core/primary.js';
import { type Candidate, inspect } from '../leader/inspect.js';
import { PartitionedLeadership } from '../partitions/partitioned.js';
import {
  type Dsn,
  type Keys,
  type OptionSpec,
  partitionCount,
  redact,
  UsageError,
  type Values,
} from './args.js';
import { connectionOptions, EXIT, findPrimaryOrExit, humanMs } from './common.js';

const NOTE = 'informational: a snapshot of pg_locks, it may have changed by the time you read it';

export const STATUS_OPTIONS: OptionSpec[] = [
  {
    name: 'partitions',
    type: 'string',
    value: 'N',
    help: 'the name is a PartitionedLeadership with N partitions: show its members and owners',
  },
];

/** `status --name N --partitions P`: members, how many partitions each owns, the ownerless ones. */
export async function partitionStatus(
  values: Values,
  dsn: Dsn,
  keys: Keys,
  json: boolean,
  out: NodeJS.WritableStream,
): Promise<number> {
  if (keys.name === undefined) throw new UsageError('--partitions needs --name (the name the workers share)');
  const partitions = partitionCount(values);
  // an unreachable server or a wrong password: a one-line usage error, as for the key
  const found = await findPrimaryOrExit(dsn, 'pgleaderlock-inspect');
  if (found) destroyClient(found.client);
  const r = await PartitionedLeadership.inspect({ ...connectionOptions(dsn), name: keys.name, partitions });
  const ownerless = r.owners.flatMap((o, p) => (o === null ? [p] : []));
  if (json) {
    out.write(
      `${JSON.stringify({ name: keys.name, partitions, host: r.host, members: r.members, owners: r.owners, note: NOTE })}\n`,
    );
    return EXIT.OK;
  }
  const ranges = (ps: number[]): string => {
    const parts: string[] = [];
    for (let i = 0; i < ps.length; i++) {
      let j = i;
      while (j + 1 < ps.length && ps[j + 1] === (ps[j] as number) + 1) j++;
      parts.push(i === j ? `${ps[i]}` : `${ps[i]}-${ps[j]}`);
      i = j;
    }
    return parts.join(',');
  };
  const lines = [
    `${JSON.stringify(keys.name)}, ${partitions} partitions, on ${redact(dsn.url)}`,
    `server:    ${r.host} (the primary)`,
    `members:   ${r.members.length}`,
    ...r.members.map(
      (m) =>
        `  ${m.id} (pid ${m.pid}): ${m.owned} partitions${m.partitions === partitions ? '' : ` (runs with --partitions ${m.partitions}: refused)`}`,
    ),
    `ownerless: ${ownerless.length === 0 ? 'none' : `${ownerless.length} (${ranges(ownerless)})`}`,
    `(${NOTE})`,
  ];
  out.write(`${lines.join('\n')}\n`);
  return EXIT.OK;
}

function who(c: Candidate): string {
  return `${c.id || '(no application_name)'} (pid ${c.pid}${c.clientAddr ? `, ${c.clientAddr}` : ''})`;
}

/** `priority N`, or `priority ?` when the candidate's statement does not show it (LeaderLock.inspect). */
function priority(c: Candidate): string {
  return `priority ${c.priority ?? '?'}`;
}

function age(since: Date | null): string {
  return since ? `since ${since.toISOString()} (${humanMs(Date.now() - since.getTime())} ago)` : '';
}

/** `" by <id> (pid N)"` for messages, or `""` if nobody holds it or the lookup fails. */
export async function holderText(dsn: Dsn, keys: Keys): Promise<string> {
  try {
    const found = await inspect({
      ...connectionOptions(dsn),
      key1: keys.key1,
      key2: keys.key2,
      timeoutMs: 3000,
    });
    return found.leader ? ` by ${who(found.leader)}` : '';
  } catch {
    return '';
  }
}

export async function status(
  dsn: Dsn,
  keys: Keys,
  json: boolean,
  out: NodeJS.WritableStream,
): Promise<number> {
  // an unreachable server, a bad password or a malformed host list is a one-line usage error
  const found = (await findPrimaryOrExit(dsn, 'pgleaderlock-inspect')) as Found;
  const result = await inspect({ connect: async () => found.client, key1: keys.key1, key2: keys.key2 });
  const host = found.endpoint.label;
  if (json) {
    out.write(
      `${JSON.stringify({ key1: keys.key1, key2: keys.key2, ...(keys.name === undefined ? {} : { name: keys.name }), host, leader: result.leader, pending: result.pending, waiters: result.waiters, note: NOTE })}\n`,
    );
    return EXIT.OK;
  }
  const lines = [
    `key (${keys.key1}, ${keys.key2})${keys.name === undefined ? '' : ` from name ${JSON.stringify(keys.name)}`} on ${redact(dsn.url)}`,
    `server:  ${host} (the primary)`,
    result.leader
      ? `${result.pending ? 'pending:' : 'leader: '} ${who(result.leader)}, session ${age(result.leader.since)}, ${priority(result.leader)}${result.pending ? ' (holds the lock; its term opens after the takeover delay)' : ''}`
      : 'leader:  none (the key is free)',
    `waiting: ${result.waiters.length === 0 ? 'none' : result.waiters.length}`,
    ...result.waiters.map(
      (w, i) => `  ${i + 1}. ${[`${who(w)} ${age(w.since)}`.trimEnd(), priority(w)].join(', ')}`,
    ),
    `(${NOTE})`,
  ];
  out.write(`${lines.join('\n')}\n`);
  return EXIT.OK;
}

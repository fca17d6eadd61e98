/** `pgleaderlock status`: who holds the key and who waits, from pg_locks. Informational. */
import { type Candidate, inspect } from '../inspect.js';
import type { Found } from '../primary.js';
import { type Dsn, type Keys, redact } from './args.js';
import { connectionOptions, EXIT, findPrimaryOrExit, humanMs } from './common.js';

const NOTE = 'informational: a snapshot of pg_locks, it may have changed by the time you read it';

function who(c: Candidate): string {
  return `${c.id || '(no application_name)'} (pid ${c.pid}${c.clientAddr ? `, ${c.clientAddr}` : ''})`;
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
      ? `${result.pending ? 'pending:' : 'leader: '} ${who(result.leader)}, session ${age(result.leader.since)}${result.pending ? ' (holds the lock; its term opens after the takeover fence)' : ''}`
      : 'leader:  none (the key is free)',
    `waiting: ${result.waiters.length === 0 ? 'none' : result.waiters.length}`,
    ...result.waiters.map((w, i) => `  ${i + 1}. ${who(w)} ${age(w.since)}`.trimEnd()),
    `(${NOTE})`,
  ];
  out.write(`${lines.join('\n')}\n`);
  return EXIT.OK;
}

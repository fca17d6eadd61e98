/**
 * The statements of `PartitionedLeadership` (src/partitions/sql.ts, member-session.ts,
 * watch.ts, ownership.ts): the member lock, the reconcile's read of pg_locks (members and
 * the partitions this session holds), take, give (with values, and the script that
 * announces `released`, unlocks and announces `freed`), the ring watch's wait, unlock and
 * late-grant check, a bare LISTEN, and the two untagged
 * statements (`SELECT pg_notify($1, $2)`, `SELECT pg_advisory_unlock($1, $2)`).
 * Returns null for a statement that is not one of these.
 */
import type { Backend, Reply, Result } from './backend.js';
import { type Engine, queueFor } from './engine.js';
import { LIT, unquote } from './text.js';

function row(r: Record<string, unknown>): Result {
  return { rows: [r] };
}

/** The keys `k1:*` held by someone: [holder, key2] in the order the table knows them. */
function holdersOf(s: Engine, k1: number): [Backend, number][] {
  const out: [Backend, number][] = [];
  const prefix = `${k1}:`; // keys are written `${Number(k1)}:${Number(k2)}`
  for (const [key, e] of s.locks.locks) {
    if (e.holder && key.startsWith(prefix)) out.push([e.holder, Number(key.slice(prefix.length))]);
  }
  return out;
}

export function executePartition(
  s: Engine,
  b: Backend,
  tag: string | undefined,
  text: string,
  values: unknown[],
): Reply | 'wait' | null {
  const same = (token: unknown): boolean => b.marker !== null && b.marker === token;
  const k = (k1: unknown, k2: unknown): string => `${Number(k1)}:${Number(k2)}`;
  if (tag === undefined) {
    if (text === 'SELECT pg_notify($1, $2)') {
      s.notify([{ channel: String(values[0]), payload: String(values[1]) }]);
      return { result: row({ pg_notify: '' }) };
    }
    if (text === 'SELECT pg_advisory_unlock($1, $2)') {
      return { result: row({ pg_advisory_unlock: s.locks.unlock(b, k(values[0], values[1])) }) };
    }
    return null;
  }
  switch (tag) {
    case 'listen': {
      const m = /^\/\* pgleaderlock:listen \*\/ LISTEN (\w+)$/.exec(text);
      if (!m) return null;
      b.listening.add(m[1] as string);
      return { result: { rows: [] } };
    }
    case 'member': {
      const ok = same(values[2]);
      return {
        result: row({ pid: b.pid, same: ok, got: ok ? s.locks.tryLock(b, k(values[0], values[1])) : false }),
      };
    }
    case 'partitions': {
      const members = holdersOf(s, Number(values[0])).map(([h, slot]) => ({
        app: h.appName,
        slot,
        pid: h.pid,
      }));
      const held = holdersOf(s, Number(values[1]))
        .filter(([h]) => h === b)
        .map(([, p]) => p)
        .sort((x, y) => x - y);
      return { result: row({ members, held, pid: b.pid, same: same(values[2]) }) };
    }
    case 'take': {
      const ok = same(values[2]);
      const taken = (values[1] as number[]).filter((p) => ok && s.locks.tryLock(b, k(values[0], p)));
      return { result: row({ pid: b.pid, same: ok, taken: taken.length ? taken : null }) };
    }
    case 'give': {
      if (Array.isArray(values[1])) {
        const ok = same(values[2]);
        const released = (values[1] as number[]).filter(
          (p) => ok && s.locks.unlock(b, k(values[0], p)),
        ).length;
        return { result: row({ released }) };
      }
      if (values.length > 0) return null; // LeaderLock's give notice
      return { result: giveScript(s, b, text) };
    }
    case 'watch': {
      const wait = /pg_advisory_lock\(\((-?\d+)\)::int4, \((-?\d+)\)::int4\)/.exec(text);
      if (wait) {
        const key = k(wait[1], wait[2]);
        const done = { rows: [{ pg_advisory_lock: '' }] };
        if (s.locks.tryLock(b, key)) return { result: done };
        queueFor(s, b, key, s.world.now, () => s.finish(b, { result: done }));
        return 'wait';
      }
      const key = k(values[0], values[1]);
      if (text.includes('FROM pg_locks')) {
        return { result: { rows: b.held.has(key) ? [{ freed: s.locks.unlock(b, key) }] : [] } };
      }
      return { result: row({ pg_advisory_unlock: s.locks.unlock(b, key) }) };
    }
    default:
      return null;
  }
}

/** sql.ts giveScript: `released` notices committed, then the partitions unlocked, then `freed`; each only with the marker. */
function giveScript(s: Engine, b: Backend, text: string): Result {
  const token = new RegExp(`current_setting\\('pgleaderlock\\.session', true\\) = (${LIT})`).exec(text);
  const unlock =
    /pg_advisory_unlock\((-?\d+), p\) ELSE false END\) FROM unnest\(ARRAY\[([-\d,]*)\]::int4\[\]\)/.exec(
      text,
    );
  const commit = text.indexOf('COMMIT;');
  if (!token || !unlock || commit < 0) throw new Error(`sim: unparsed give script: ${text.slice(0, 160)}`);
  const mine = b.marker !== null && b.marker === unquote(token[1] as string);
  const notices = (part: string) =>
    [...part.matchAll(new RegExp(`SELECT pg_notify\\((${LIT}), (${LIT})\\) WHERE`, 'g'))].map((m) => ({
      channel: unquote(m[1] as string),
      payload: unquote(m[2] as string),
    }));
  const released = notices(text.slice(0, commit));
  const freed = notices(text.slice(commit));
  if (mine) s.notify(released);
  const parts = (unlock[2] as string).split(',').filter(Boolean).map(Number);
  const count = mine ? parts.filter((p) => s.locks.unlock(b, `${Number(unlock[1])}:${p}`)).length : 0;
  if (mine) s.notify(freed);
  return [
    { rows: [] },
    ...released.map(() => ({ rows: [] })),
    { rows: [] },
    { rows: [{ count }] },
    { rows: mine ? [{}] : [] },
  ];
}

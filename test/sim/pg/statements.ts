/**
 * The lock's statements (src/leader/sql.ts, src/core/statements.ts, the survey), told
 * apart by their `/* pgleaderlock:<name> *\/` tag as the unit tests' fake server does
 * (test/unit/fakes.ts); an unknown one is a gap of the model (thrown: the run fails).
 */
import { CURRENT_HOLDER, WAIT_LOCK } from '../../../src/leader/sql.js';
import { parseSetupBatch, uninline } from '../../unit/fakes.js';
import type { Backend, Reply, Result } from './backend.js';
import { holderRows, queuedRows, successorRow } from './catalog.js';
import { type Engine, queueFor } from './engine.js';
import { executePartition } from './partition-statements.js';
import { LIT, shownApplicationName, unquote } from './text.js';

const EPOCH_MS = 1_800_000_000_000;

const NO_GRANT = {
  twice: null,
  idle: null,
  async_commit: null,
  waited_ms: null,
  announced: null,
  server_ms: null,
};

function row(r: Record<string, unknown>): Result {
  return { rows: [r] };
}

/** A statement of the lock: its reply, or 'wait' (queued for a key; `finish` is called later). */
export function execute(s: Engine, b: Backend, text: string, values: unknown[]): Reply | 'wait' {
  const tag = /^\/\* pgleaderlock:([a-z-]+) \*\//.exec(text)?.[1];
  const key = (): string => `${Number(values[0])}:${Number(values[1])}`;
  const same = (token: unknown): boolean => b.marker !== null && b.marker === token;
  if (text === 'SHOW pool_version')
    return {
      error: { code: '42704', message: 'unrecognized configuration parameter "pool_version"', fatal: false },
    };
  const partition = executePartition(s, b, tag, text, values);
  if (partition !== null) return partition;
  const refused = s.recovery ? duringRecovery(tag, text) : null;
  if (refused)
    return { error: { code: '25006', message: `cannot execute ${refused} during recovery`, fatal: false } };
  const timeline = s.recovery ? null : s.timeline;
  switch (tag) {
    case 'survey':
      return { result: row({ recovery: s.recovery, system_id: 'sim', timeline }) };
    case 'peer':
      return { result: row({ recovery: s.recovery, timeline }) };
    case 'leader-watch':
      return leaderWatch(s, b, text);
    case 'prepare':
      if (values.length === 0) return setupBatch(s, b, text);
      b.marker = String(values[0]);
      b.appName = shownApplicationName(String(values[1]));
      return {
        result: row({
          version: 160000,
          recovery: s.recovery,
          pid: b.pid,
          server_addr: null,
          server_port: null,
          marker: b.marker,
          app: values[1],
        }),
      };
    case 'configure':
      for (let i = 0; i + 1 < values.length; i += 2) s.set(b, String(values[i]), String(values[i + 1]));
      return { result: row({}) };
    case 'settings': {
      const names = (values[0] as string[]) ?? [];
      const rows = names
        .filter((n) => b.settings.has(n))
        .map((name) => ({ name, setting: String(b.settings.get(name)) }));
      return { result: { rows } };
    }
    case 'listen': {
      // BEGIN; LISTEN; NOTIFY; COMMIT; then the holder read (key-channel.ts `listen`)
      const m = new RegExp(
        `BEGIN; LISTEN (\\w+); SELECT pg_notify\\('(\\w+)', (${LIT})\\); COMMIT;\\n(/\\* pgleaderlock:holder \\*/[^]*)$`,
      ).exec(text);
      if (!m) throw new Error(`sim: unparsed listen: ${text.slice(0, 120)}`);
      b.listening.add(m[1] as string); // takes effect at commit, with the notify: it hears its own
      s.notify([{ channel: m[2] as string, payload: unquote(m[3] as string) }]);
      const holder = holderRows(s.locks, uninline(CURRENT_HOLDER, m[4] as string).join(':'));
      const empty = { rows: [] as Record<string, unknown>[] };
      return { result: [empty, empty, row({ pg_notify: '' }) as typeof empty, empty, { rows: holder }] };
    }
    case 'probe':
      return { result: row({ pid: b.pid, marker: b.marker || null, held: b.held.has(key()) }) };
    case 'pinned':
      return { result: row({ pid: b.pid, same: same(values[2]), held: b.held.has(key()) }) };
    case 'holder':
      return { result: { rows: holderRows(s.locks, key()) } };
    case 'check':
    case 'pending':
      return {
        result: row({ pid: b.pid, same: same(values[2]), held: b.held.has(key()), recovery: s.recovery }),
      };
    case 'try-lock':
    case 'late-grant': {
      const r = acquire(s, b, tag, values);
      return r.ok === true && s.recovery ? NOTIFY_IN_RECOVERY : { result: row(r) };
    }
    case 'wait-lock':
      return waitLock(s, b, uninline(WAIT_LOCK, text));
    case 'release':
      return { result: release(s, b, text) };
    case 'queued':
      return { result: { rows: queuedRows(s.locks, key()) } };
    case 'successor':
      return { result: row(successorRow(s.locks, s.backends.values(), key(), String(values[2]))) };
    case 'waiting':
    case 'drained':
    case 'give':
      s.notify([{ channel: String(values[0]), payload: String(values[1]) }]);
      return { result: row({ pg_notify: '' }) };
    case 'free-stranded': {
      const k = key();
      const pid = Number(values[2]);
      const h = s.locks.holderOf(k);
      if (!h || h.pid !== pid) return { result: { rows: [] } };
      if (h === b) {
        if (values[3] === true) {
          s.locks.unlockAll(b);
          return { result: row({ freed: true }) };
        }
        return { result: row({ freed: [s.locks.unlock(b, k), s.locks.unlock(b, k)].some(Boolean) }) };
      }
      return { result: row({ freed: s.terminate(pid) }) };
    }
    default:
      throw new Error(`sim: statement not modelled: ${text.slice(0, 80)}`);
  }
}

/**
 * The set-up in one round trip (src/core/prepare.ts `setupBatch`): PREPARE; the settings
 * where the backend is the one announced and not in recovery; the read-back.
 */
function setupBatch(s: Engine, b: Backend, text: string): Reply {
  const batch = parseSetupBatch(text);
  const prepared = execute(s, b, '/* pgleaderlock:prepare */', [batch.token, batch.appName]);
  if (prepared === 'wait' || !('result' in prepared)) return prepared as Reply;
  const first = prepared.result as { rows: Record<string, unknown>[] };
  const info = first.rows[0] as { version: number; recovery: boolean };
  const direct = batch.announced === b.pid && !info.recovery;
  if (direct) {
    for (const x of batch.settings) if (x.since <= info.version) s.set(b, x.name, x.value);
  }
  const read = batch.names
    .filter((n) => b.settings.has(n))
    .map((name) => ({ name, setting: String(b.settings.get(name)) }));
  return { result: [first, { rows: [{ applied: direct }] }, { rows: read }] };
}

/**
 * What a hot standby refuses of a statement (SQLSTATE 25006, "cannot execute … during
 * recovery", before it runs: nothing of it happens): LISTEN, and NOTIFY (pg_notify() checks
 * it too; the release's is taken as refused before its unlock). Advisory locks are granted
 * there as on a primary (they are not WAL-logged): see NOTIFY_IN_RECOVERY.
 */
function duringRecovery(tag: string | undefined, text: string): string | null {
  if (/\bLISTEN \w/.test(text)) return 'LISTEN';
  if (tag === 'waiting' || tag === 'drained' || tag === 'give' || tag === 'release') return 'NOTIFY';
  return null;
}

/**
 * A grant on a standby: the lock is taken (and taken twice, ON_GRANT's `twice`), then the
 * statement's pg_notify fails; session advisory locks outlive the failed statement.
 */
const NOTIFY_IN_RECOVERY: Reply = {
  error: { code: '25006', message: 'cannot execute NOTIFY during recovery', fatal: false },
};

/** A LeaderWatch's statements (src/watch/session.ts): its name and LISTEN, or the holder read. */
function leaderWatch(s: Engine, b: Backend, text: string): Reply {
  const listen = new RegExp(`set_config\\('application_name', (${LIT}), false\\); LISTEN (\\w+)$`).exec(text);
  if (listen) {
    b.appName = shownApplicationName(unquote(listen[1] as string));
    b.listening.add(listen[2] as string);
    return { result: [{ rows: [{ set_config: b.appName }] }, { rows: [] }] };
  }
  const keys = /l\.classid = \((-?\d+)\)::int4::oid AND l\.objid = \((-?\d+)\)::int4::oid/.exec(text);
  if (!keys) throw new Error(`sim: unparsed leader-watch statement: ${text.slice(0, 120)}`);
  const h = s.locks.holderOf(`${Number(keys[1])}:${Number(keys[2])}`);
  const none = { held: null, application_name: null, backend_start: null, query: null };
  const held = h
    ? {
        held: true,
        application_name: h.appName,
        backend_start: new Date(EPOCH_MS + h.startedAt),
        query: h.query,
      }
    : none;
  return { result: row({ recovery: s.recovery, ...held }) };
}

/** sql.ts ON_GRANT, after a grant: the key a second time, idle_session_timeout, the acquired event, the times. */
function onGrant(s: Engine, b: Backend, values: unknown[], startedAt: number): Record<string, unknown> {
  const twice = s.locks.tryLock(b, `${Number(values[0])}:${Number(values[1])}`);
  const arm = values[3];
  const idle = typeof arm === 'string' ? s.set(b, 'idle_session_timeout', arm) : null;
  const notes =
    typeof values[4] === 'string' && typeof values[5] === 'string'
      ? [{ channel: values[5], payload: values[4] }]
      : [];
  if (!s.recovery) s.notify(notes);
  return {
    twice,
    idle,
    async_commit: 'off',
    waited_ms: s.world.now - startedAt,
    announced: notes.length,
    server_ms: Math.floor(EPOCH_MS + s.world.now),
  };
}

/** TRY_LOCK and LATE_GRANT (sql.ts). */
function acquire(s: Engine, b: Backend, tag: string, values: unknown[]): Record<string, unknown> {
  const key = `${Number(values[0])}:${Number(values[1])}`;
  const same = b.marker !== null && b.marker === values[2];
  if (tag === 'late-grant') {
    const ok = same && b.held.has(key);
    const base = { pid: b.pid, same, held_before: false, ok };
    return ok ? { ...base, ...onGrant(s, b, values, s.world.now) } : { ...base, ...NO_GRANT };
  }
  const heldBefore = b.held.has(key);
  const ok = same && !heldBefore ? s.locks.tryLock(b, key) : false;
  const base = { pid: b.pid, same, held_before: heldBefore, ok };
  return ok ? { ...base, ...onGrant(s, b, values, s.world.now) } : { ...base, ...NO_GRANT };
}

/** WAIT_LOCK: granted now, or queued (FIFO) until granted or lock_timeout (55P03). */
function waitLock(s: Engine, b: Backend, values: unknown[]): Reply | 'wait' {
  const key = `${Number(values[0])}:${Number(values[1])}`;
  const same = b.marker !== null && b.marker === values[2];
  const heldBefore = b.held.has(key);
  const startedAt = s.world.now;
  const base = { pid: b.pid, same, held_before: heldBefore };
  if (!same || heldBefore) return { result: row({ ...base, ok: false, ...NO_GRANT }) };
  const granted = (): Reply => {
    const r = onGrant(s, b, values, startedAt);
    return s.recovery ? NOTIFY_IN_RECOVERY : { result: row({ ...base, ok: true, ...r }) };
  };
  if (s.locks.tryLock(b, key)) return granted();
  queueFor(s, b, key, startedAt, () => s.finish(b, granted()));
  return 'wait';
}

/** sql.ts releaseSql, statement by statement. */
function release(s: Engine, b: Backend, text: string): Result {
  if (text.includes('UPDATE ')) throw new Error('sim: fencing is not modelled');
  const token = new RegExp(`current_setting\\('pgleaderlock\\.session', true\\) = (${LIT})`).exec(text);
  const keys = /pg_advisory_unlock\(\((-?\d+)\)::int4, \((-?\d+)\)::int4\)/.exec(text);
  const notify = new RegExp(`pg_notify\\((${LIT}), `).exec(text);
  if (!token || !keys || !notify) throw new Error(`sim: unparsed release: ${text.slice(0, 120)}`);
  const key = `${Number(keys[1])}:${Number(keys[2])}`;
  const mine = b.marker !== null && b.marker === unquote(token[1] as string);
  const after = text.slice(notify.index + notify[0].length);
  const payload = after.startsWith('json_build_object(')
    ? directive(s, after)
    : unquote(new RegExp(`^${LIT}`).exec(after)?.[0] ?? "''");
  // BEGIN; SELECT pg_notify(…) WHERE mine AND unlock AND try-lock; COMMIT
  const guard = mine ? (s.locks.unlock(b, key) ? s.locks.tryLock(b, key) : false) : false;
  s.notify(guard ? [{ channel: unquote(notify[1] as string), payload }] : []);
  // SELECT same, ok (unlock, then unlock_all), disarm
  const ok = mine && s.locks.unlock(b, key);
  if (ok) s.locks.unlockAll(b);
  const last: Record<string, unknown> = { same: mine, ok };
  if (text.includes("set_config('idle_session_timeout', '0', false) AS disarmed")) {
    last.disarmed = s.set(b, 'idle_session_timeout', '0');
  }
  return [{ rows: [] }, { rows: guard ? [{}] : [] }, { rows: [] }, { rows: [last] }];
}

/** A new handover's `released` payload, its deadlines computed on the server's clock (json_build_object's text). */
function directive(s: Engine, sql: string): string {
  const field = (name: string): string | null => {
    const m = new RegExp(`'${name}', (NULL::text|${LIT})`).exec(sql);
    if (!m) throw new Error(`sim: unparsed directive field ${name}`);
    return m[1] === 'NULL::text' ? null : unquote(m[1] as string);
  };
  const plus = [...sql.matchAll(/::bigint \+ (\d+)/g)].map((m) => Number(m[1]));
  const nowMs = Math.floor(EPOCH_MS + s.world.now);
  const out: [string, unknown][] = [
    ['e', 'released'],
    ['id', field('id')],
    ['s', field('s')],
    ['to', field('to')],
    ['back', field('back')],
    ['until', nowMs + (plus[0] ?? 0)],
    ['backUntil', nowMs + (plus[1] ?? 0)],
  ];
  return `{${out.map(([k, v]) => `"${k}" : ${JSON.stringify(v)}`).join(', ')}}`;
}

export type { Engine } from './engine.js';

/**
 * A simulated PostgreSQL for the statements the lock runs (src/leader/sql.ts,
 * src/core/statements.ts, the survey): backends with pids and session settings, session
 * advisory locks with PostgreSQL's FIFO wait queue (re-entrant counts, unlock,
 * pg_advisory_unlock_all, lock_timeout ending a wait with 55P03), pg_locks and
 * pg_stat_activity as the library reads them (application_name cleaned by pg_clean_ascii
 * and cut at 63 bytes, the query cut at 1 kB), LISTEN/NOTIFY delivered at commit to the
 * sessions listening then, in commit order, only while a session is idle, and the ways a
 * backend ends (terminate, restart, idle_session_timeout, keepalive, tcp_user_timeout, its
 * client gone). Statements are told apart by their `/* pgleaderlock:<name> *\/` tag, as the
 * unit tests' fake server does (test/unit/fakes.ts); an unknown one is a gap of the model
 * and fails the run.
 */
import { WAIT_LOCK } from '../../src/leader/sql.js';
import { uninline } from '../unit/fakes.js';
import type { Link } from './net.js';
import type { Random } from './random.js';
import type { World } from './world.js';

export type Result = { rows: Record<string, unknown>[] } | { rows: Record<string, unknown>[] }[];
export type Reply = { result: Result } | { error: SqlError };
export interface SqlError {
  message: string;
  code: string;
  fatal: boolean;
}

/** Why a backend stopped holding a key (the checker tells the ways the library cannot see coming). */
export type ReleaseCause =
  | 'unlock'
  | 'client'
  | 'crash'
  | 'terminate'
  | 'restart'
  | 'reset'
  | 'idle-timeout'
  | 'keepalive'
  | 'user-timeout';

/** The lock is gone at once, before the holder can know (docs/safety.md, "the lock gone at once"). */
export const INSTANT: ReadonlySet<ReleaseCause> = new Set(['crash', 'terminate', 'restart', 'reset']);

const EPOCH_MS = 1_800_000_000_000;
const SETTINGS = [
  'idle_session_timeout',
  'tcp_keepalives_idle',
  'tcp_keepalives_interval',
  'tcp_keepalives_count',
  'tcp_user_timeout',
  'client_connection_check_interval',
  'lock_timeout',
];

/** PostgreSQL's pg_clean_ascii (PG16+): each byte outside 32..126 becomes `\xNN`. */
export function cleanAscii(s: string): string {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    out += b >= 32 && b <= 126 ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`;
  }
  return out;
}

/** application_name as pg_stat_activity shows it: cleaned, then cut to NAMEDATALEN - 1 = 63 bytes. */
export function shownApplicationName(s: string): string {
  return cleanAscii(s).slice(0, 63);
}

/** pg_stat_activity.query: cut to track_activity_query_size - 1 = 1023 bytes on a character boundary. */
function shownQuery(s: string): string {
  const buf = Buffer.from(s, 'utf8');
  if (buf.length <= 1023) return s;
  let end = 1023;
  while (end > 0 && ((buf[end] ?? 0) & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString('utf8');
}

/** A time setting as set_config returns it: the largest unit that divides it exactly. */
function showMs(ms: number): string {
  if (ms === 0) return '0';
  for (const [unit, f] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['min', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms % f === 0) return `${ms / f}${unit}`;
  }
  return `${ms}ms`;
}

/** A literal as pg.escapeLiteral writes it (`'…'`, or ` E'…'` with backslashes), read back. */
const LIT = String.raw`(?: ?E'(?:[^'\\]|''|\\\\)*'|'(?:[^']|'')*')`;
function unquote(lit: string): string {
  const t = lit.trim();
  if (t.startsWith("E'")) return t.slice(2, -1).replaceAll("''", "'").replaceAll('\\\\', '\\');
  return t.slice(1, -1).replaceAll("''", "'");
}

interface Waiting {
  key: string;
  since: number;
  timer: { cancelled: boolean } | null;
  /** Completes the statement once granted. */
  granted: () => void;
}

export class Backend {
  alive = true;
  readonly settings = new Map<string, number>(SETTINGS.map((n) => [n, 0]));
  appName = '';
  marker: string | null = null;
  readonly listening = new Set<string>();
  /** key -> re-entrant count */
  readonly held = new Map<string, number>();
  query = '';
  queryStart = 0;
  /** A statement is running (a lock wait included). */
  busy = false;
  waiting: Waiting | null = null;
  /** Notifications committed for it, not yet sent (it was busy). */
  pendingNotify: { channel: string; payload: string }[] = [];
  /** Its client closed the socket while it was busy: it ends once its statement does. */
  peerGone = false;
  idleEpoch = 0;
  lastRecv = 0;
  /** Blackhole: when the first byte it sent went unacknowledged. */
  firstUnacked: number | null = null;

  constructor(
    readonly pid: number,
    readonly owner: string,
    readonly link: Link,
  ) {}
}

export interface ServerHooks {
  /** The key changed hands (holder null: free). */
  onHolder(key: string, holder: Backend | null, cause: ReleaseCause | null): void;
  /** A statement the model does not know. */
  onGap(what: string): void;
}

export class SimServer {
  up = true;
  private nextPid = 100;
  readonly backends = new Map<number, Backend>();
  /** key -> holder and FIFO wait queue */
  readonly locks = new Map<string, { holder: Backend | null; queue: Backend[] }>();

  constructor(
    private readonly world: World,
    private readonly rng: Random,
    private readonly hooks: ServerHooks,
  ) {}

  holderOf(key: string): Backend | null {
    return this.locks.get(key)?.holder ?? null;
  }

  /** A new backend for a connection that reached the server. */
  open(owner: string, link: Link): Backend {
    const b = new Backend(this.nextPid++, owner, link);
    b.lastRecv = this.world.now;
    this.backends.set(b.pid, b);
    this.idle(b);
    return b;
  }

  // ---- the wire ----

  /** A statement arrives. */
  receive(b: Backend, text: string, values: unknown[]): void {
    if (!b.alive) return;
    b.lastRecv = this.world.now;
    b.idleEpoch++;
    b.busy = true;
    b.query = shownQuery(text);
    b.queryStart = this.world.now;
    let reply: Reply | 'wait';
    try {
      reply = this.execute(b, text, values);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.hooks.onGap(message);
      reply = { error: { message, code: 'XX000', fatal: false } };
    }
    if (reply !== 'wait') this.finish(b, reply);
  }

  /** The client sent Terminate, or its socket closed (FIN/RST reached the server). */
  peerClosed(b: Backend, cause: ReleaseCause): void {
    if (!b.alive) return;
    if (!b.busy) {
      this.close(b, cause);
      return;
    }
    // a backend running a statement does not read its socket: it notices within
    // client_connection_check_interval (PG14+), else when the statement ends
    const interval = b.settings.get('client_connection_check_interval') ?? 0;
    b.peerGone = true;
    if (interval > 0) {
      this.world.schedule(this.rng.between(0, interval), null, 'server', () => {
        if (b.alive) this.close(b, cause);
      });
    }
  }

  /** pg_terminate_backend: returns at once; the backend exits a moment later. */
  terminate(pid: number): boolean {
    const b = this.backends.get(pid);
    if (!b?.alive) return false;
    this.world.schedule(this.rng.between(0.05, 2), null, 'server', () => {
      if (!b.alive) return;
      this.fatal(b, '57P01', 'terminating connection due to administrator command', 'terminate');
    });
    return true;
  }

  /** A fast shutdown: every backend is told 57P01 and ends; nothing is accepted until `start`. */
  stop(): void {
    this.up = false;
    for (const b of [...this.backends.values()]) {
      this.fatal(b, '57P01', 'terminating connection due to administrator command', 'restart');
    }
  }

  start(): void {
    this.up = true;
  }

  /** The server's side of a blackholed connection: nothing arrives; keepalive or tcp_user_timeout end it. */
  blackholed(b: Backend): void {
    const idle = b.settings.get('tcp_keepalives_idle') ?? 0;
    const interval = b.settings.get('tcp_keepalives_interval') ?? 0;
    const count = b.settings.get('tcp_keepalives_count') ?? 0;
    if (idle > 0 && interval > 0 && count > 0) {
      const at = b.lastRecv + (idle + interval * count) * 1000;
      this.world.schedule(Math.max(0, at - this.world.now), null, 'server', () => {
        if (b.alive) this.close(b, 'keepalive');
      });
    }
  }

  /** Something the server sent into a blackhole: unacknowledged data, dropped after tcp_user_timeout. */
  unacked(b: Backend): void {
    if (b.firstUnacked !== null) return;
    b.firstUnacked = this.world.now;
    const t = b.settings.get('tcp_user_timeout') ?? 0;
    if (t > 0) {
      this.world.schedule(t, null, 'server', () => {
        if (b.alive) this.close(b, 'user-timeout');
      });
    }
  }

  // ---- sessions ----

  private finish(b: Backend, reply: Reply): void {
    b.busy = false;
    const notes = b.pendingNotify;
    b.pendingNotify = [];
    if (b.peerGone) {
      this.close(b, 'client');
      return;
    }
    b.link.toClient({ notifications: notes, reply });
    this.idle(b);
  }

  private idle(b: Backend): void {
    const epoch = ++b.idleEpoch;
    const t = b.settings.get('idle_session_timeout') ?? 0;
    if (t <= 0) return;
    this.world.schedule(t, null, 'server', () => {
      if (b.alive && !b.busy && b.idleEpoch === epoch) {
        this.fatal(b, '57P05', 'terminating connection due to idle-session timeout', 'idle-timeout');
      }
    });
  }

  private fatal(b: Backend, code: string, message: string, cause: ReleaseCause): void {
    b.link.toClient({ notifications: [], reply: { error: { code, message, fatal: true } } });
    this.close(b, cause);
  }

  /** The backend exits: its locks are freed (waiters granted), it leaves every queue, stops listening. */
  close(b: Backend, cause: ReleaseCause): void {
    if (!b.alive) return;
    b.alive = false;
    this.backends.delete(b.pid);
    if (b.waiting) this.leaveQueue(b);
    for (const key of [...b.held.keys()]) {
      b.held.delete(key);
      this.freed(key, b, cause);
    }
    b.listening.clear();
    b.link.serverGone();
  }

  // ---- advisory locks ----

  private entry(key: string): { holder: Backend | null; queue: Backend[] } {
    let e = this.locks.get(key);
    if (!e) {
      e = { holder: null, queue: [] };
      this.locks.set(key, e);
    }
    return e;
  }

  /** pg_try_advisory_lock: re-entrant; refused while another holds it or anyone queues. */
  private tryLock(b: Backend, key: string): boolean {
    const n = b.held.get(key);
    if (n !== undefined) {
      b.held.set(key, n + 1);
      return true;
    }
    const e = this.entry(key);
    if (e.holder !== null || e.queue.length > 0) return false;
    e.holder = b;
    b.held.set(key, 1);
    this.hooks.onHolder(key, b, null);
    return true;
  }

  /** pg_advisory_unlock: false (and a WARNING) when not held here. */
  private unlock(b: Backend, key: string): boolean {
    const n = b.held.get(key);
    if (n === undefined) return false;
    if (n > 1) {
      b.held.set(key, n - 1);
      return true;
    }
    b.held.delete(key);
    this.freed(key, b, 'unlock');
    return true;
  }

  private unlockAll(b: Backend): void {
    for (const key of [...b.held.keys()]) {
      b.held.delete(key);
      this.freed(key, b, 'unlock');
    }
  }

  /** The key left `b`: grant it to the first waiter (at once; its statement resumes a moment later). */
  private freed(key: string, b: Backend, cause: ReleaseCause): void {
    const e = this.entry(key);
    if (e.holder !== b) return;
    e.holder = null;
    this.hooks.onHolder(key, null, cause);
    const next = e.queue.shift();
    if (!next) return;
    const w = next.waiting as Waiting;
    if (w.timer) w.timer.cancelled = true;
    next.waiting = null;
    e.holder = next;
    next.held.set(key, 1);
    this.hooks.onHolder(key, next, null);
    this.world.schedule(this.rng.between(0.01, 2), null, 'server', () => {
      if (next.alive) w.granted();
    });
  }

  private leaveQueue(b: Backend): void {
    const w = b.waiting;
    if (!w) return;
    if (w.timer) w.timer.cancelled = true;
    b.waiting = null;
    const e = this.entry(w.key);
    e.queue = e.queue.filter((x) => x !== b);
  }

  // ---- NOTIFY ----

  /** Committed: delivered to the sessions listening now, at once if idle, else after their statement. */
  private commitNotify(notes: { channel: string; payload: string }[]): void {
    for (const n of notes) {
      this.world.log(() => `server: NOTIFY ${n.payload}`);
      for (const r of this.backends.values()) {
        if (!r.alive || !r.listening.has(n.channel)) continue;
        r.pendingNotify.push(n);
      }
    }
    for (const r of this.backends.values()) {
      if (r.alive && !r.busy && r.pendingNotify.length > 0) {
        const sent = r.pendingNotify;
        r.pendingNotify = [];
        r.link.toClient({ notifications: sent, reply: null });
      }
    }
  }

  // ---- statements ----

  private row(r: Record<string, unknown>): Result {
    return { rows: [r] };
  }

  private execute(b: Backend, text: string, values: unknown[]): Reply | 'wait' {
    const tag = /^\/\* pgleaderlock:([a-z-]+) \*\//.exec(text)?.[1];
    const key = (): string => `${Number(values[0])}:${Number(values[1])}`;
    const same = (token: unknown): boolean => b.marker !== null && b.marker === token;
    switch (tag) {
      case 'survey':
        return { result: this.row({ recovery: false, system_id: 'sim', timeline: 1 }) };
      case 'prepare':
        b.marker = String(values[0]);
        b.appName = shownApplicationName(String(values[1]));
        return {
          result: this.row({
            version: 160000,
            recovery: false,
            pid: b.pid,
            server_addr: null,
            server_port: null,
            marker: b.marker,
            app: values[1],
          }),
        };
      case 'configure':
        for (let i = 0; i + 1 < values.length; i += 2) this.set(b, String(values[i]), String(values[i + 1]));
        return { result: this.row({}) };
      case 'settings': {
        const names = (values[0] as string[]) ?? [];
        const rows = names
          .filter((n) => b.settings.has(n))
          .map((name) => ({ name, setting: String(b.settings.get(name)) }));
        return { result: { rows } };
      }
      case 'listen': {
        const m = new RegExp(`LISTEN (\\w+); SELECT pg_notify\\('(\\w+)', (${LIT})\\)$`).exec(text);
        if (!m) throw new Error(`sim: unparsed listen: ${text.slice(0, 120)}`);
        b.listening.add(m[1] as string); // takes effect at commit, with the notify: it hears its own
        this.commitNotify([{ channel: m[2] as string, payload: unquote(m[3] as string) }]);
        return { result: [{ rows: [] }, this.row({ pg_notify: '' }) as { rows: Record<string, unknown>[] }] };
      }
      case 'holder': {
        const h = this.holderOf(key());
        return { result: { rows: h ? [{ pid: h.pid, application_name: h.appName }] : [] } };
      }
      case 'check':
      case 'pending':
        return {
          result: this.row({ pid: b.pid, same: same(values[2]), held: b.held.has(key()), recovery: false }),
        };
      case 'try-lock':
      case 'late-grant':
        return { result: this.row(this.acquire(b, tag, values)) };
      case 'wait-lock':
        return this.waitLock(b, uninline(WAIT_LOCK, text));
      case 'release':
        return { result: this.release(b, text) };
      case 'queued': {
        const e = this.entry(key());
        const rows = [...e.queue]
          .sort((x, y) => x.queryStart - y.queryStart)
          .map((w) => ({ application_name: w.appName, query: w.query }));
        return { result: { rows } };
      }
      case 'successor': {
        const name = String(values[2]);
        const k = key();
        const e = this.entry(k);
        let sessions = 0;
        let holds = false;
        let waits = false;
        for (const x of this.backends.values()) {
          if (x.appName !== name) continue;
          sessions++;
          if (e.holder === x) holds = true;
          if (x.waiting?.key === k) waits = true;
        }
        return { result: this.row({ holds, waits, sessions }) };
      }
      case 'waiting':
      case 'drained':
      case 'give':
        this.commitNotify([{ channel: String(values[0]), payload: String(values[1]) }]);
        return { result: this.row({ pg_notify: '' }) };
      case 'free-stranded': {
        const k = key();
        const pid = Number(values[2]);
        const h = this.holderOf(k);
        if (!h || h.pid !== pid) return { result: { rows: [] } };
        if (h === b)
          return { result: this.row({ freed: [this.unlock(b, k), this.unlock(b, k)].some(Boolean) }) };
        return { result: this.row({ freed: this.terminate(pid) }) };
      }
      default:
        throw new Error(`sim: statement not modelled: ${text.slice(0, 80)}`);
    }
  }

  private set(b: Backend, name: string, value: string): string {
    if (!b.settings.has(name)) return value;
    const n = Number(value);
    b.settings.set(name, n);
    if (name === 'idle_session_timeout' && !b.busy) this.idle(b);
    return name.endsWith('_timeout') || name === 'client_connection_check_interval' ? showMs(n) : value;
  }

  /** sql.ts ON_GRANT, after a grant: the key a second time, idle_session_timeout, the acquired event, the times. */
  private onGrant(b: Backend, values: unknown[], startedAt: number): Record<string, unknown> {
    const twice = this.tryLock(b, `${Number(values[0])}:${Number(values[1])}`);
    const arm = values[3];
    const idle = typeof arm === 'string' ? this.set(b, 'idle_session_timeout', arm) : null;
    const notes =
      typeof values[4] === 'string' && typeof values[5] === 'string'
        ? [{ channel: values[5], payload: values[4] }]
        : [];
    this.commitNotify(notes);
    return {
      twice,
      idle,
      async_commit: 'off',
      waited_ms: this.world.now - startedAt,
      announced: notes.length,
      server_ms: Math.floor(EPOCH_MS + this.world.now),
    };
  }

  /** TRY_LOCK and LATE_GRANT (sql.ts). */
  private acquire(b: Backend, tag: string, values: unknown[]): Record<string, unknown> {
    const key = `${Number(values[0])}:${Number(values[1])}`;
    const same = b.marker !== null && b.marker === values[2];
    if (tag === 'late-grant') {
      const ok = same && b.held.has(key);
      const base = { pid: b.pid, same, held_before: false, ok };
      return ok ? { ...base, ...this.onGrant(b, values, this.world.now) } : { ...base, ...NO_GRANT };
    }
    const heldBefore = b.held.has(key);
    const ok = same && !heldBefore ? this.tryLock(b, key) : false;
    const base = { pid: b.pid, same, held_before: heldBefore, ok };
    return ok ? { ...base, ...this.onGrant(b, values, this.world.now) } : { ...base, ...NO_GRANT };
  }

  /** WAIT_LOCK: granted now, or queued (FIFO) until granted or lock_timeout (55P03). */
  private waitLock(b: Backend, values: unknown[]): Reply | 'wait' {
    const key = `${Number(values[0])}:${Number(values[1])}`;
    const same = b.marker !== null && b.marker === values[2];
    const heldBefore = b.held.has(key);
    const startedAt = this.world.now;
    const base = { pid: b.pid, same, held_before: heldBefore };
    if (!same || heldBefore) return { result: this.row({ ...base, ok: false, ...NO_GRANT }) };
    if (this.tryLock(b, key))
      return { result: this.row({ ...base, ok: true, ...this.onGrant(b, values, startedAt) }) };
    const e = this.entry(key);
    const lt = b.settings.get('lock_timeout') ?? 0;
    const w: Waiting = {
      key,
      since: startedAt,
      timer: null,
      granted: () =>
        this.finish(b, { result: this.row({ ...base, ok: true, ...this.onGrant(b, values, startedAt) }) }),
    };
    if (lt > 0) {
      w.timer = this.world.schedule(lt, null, 'server', () => {
        if (b.waiting !== w) return;
        this.leaveQueue(b);
        this.finish(b, {
          error: { code: '55P03', message: 'canceling statement due to lock timeout', fatal: false },
        });
      });
    }
    b.waiting = w;
    e.queue.push(b);
    return 'wait';
  }

  /** sql.ts releaseSql, statement by statement. */
  private release(b: Backend, text: string): Result {
    if (text.includes('UPDATE ')) throw new Error('sim: fencing is not modelled');
    const token = new RegExp(`current_setting\\('pgleaderlock\\.session', true\\) = (${LIT})`).exec(text);
    const keys = /pg_advisory_unlock\(\((-?\d+)\)::int4, \((-?\d+)\)::int4\)/.exec(text);
    const notify = new RegExp(`pg_notify\\((${LIT}), `).exec(text);
    if (!token || !keys || !notify) throw new Error(`sim: unparsed release: ${text.slice(0, 120)}`);
    const key = `${Number(keys[1])}:${Number(keys[2])}`;
    const mine = b.marker !== null && b.marker === unquote(token[1] as string);
    const after = text.slice(notify.index + notify[0].length);
    const payload = after.startsWith('json_build_object(')
      ? this.directive(after)
      : unquote(new RegExp(`^${LIT}`).exec(after)?.[0] ?? "''");
    // BEGIN; SELECT pg_notify(…) WHERE mine AND unlock AND try-lock; COMMIT
    const guard = mine ? (this.unlock(b, key) ? this.tryLock(b, key) : false) : false;
    this.commitNotify(guard ? [{ channel: unquote(notify[1] as string), payload }] : []);
    // SELECT same, ok (unlock, then unlock_all), disarm
    const ok = mine && this.unlock(b, key);
    if (ok) this.unlockAll(b);
    const last: Record<string, unknown> = { same: mine, ok };
    if (text.includes("set_config('idle_session_timeout', '0', false) AS disarmed")) {
      last.disarmed = this.set(b, 'idle_session_timeout', '0');
    }
    return [{ rows: [] }, { rows: guard ? [{}] : [] }, { rows: [] }, { rows: [last] }];
  }

  /** A new handover's `released` payload, its deadlines computed on the server's clock (json_build_object's text). */
  private directive(sql: string): string {
    const field = (name: string): string | null => {
      const m = new RegExp(`'${name}', (NULL::text|${LIT})`).exec(sql);
      if (!m) throw new Error(`sim: unparsed directive field ${name}`);
      return m[1] === 'NULL::text' ? null : unquote(m[1] as string);
    };
    const plus = [...sql.matchAll(/::bigint \+ (\d+)/g)].map((m) => Number(m[1]));
    const nowMs = Math.floor(EPOCH_MS + this.world.now);
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
}

const NO_GRANT = {
  twice: null,
  idle: null,
  async_commit: null,
  waited_ms: null,
  announced: null,
  server_ms: null,
};

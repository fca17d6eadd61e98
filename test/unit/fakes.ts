/**
 * Fakes for the FSM unit tests (spec §11): a scripted stand-in for `pg.Client` behind the
 * `connect` option, a fake server that tracks who holds the lock, and a manual clock.
 */
import { EventEmitter } from 'node:events';
import type pg from 'pg';
import type { Clock } from '../../src/core/clock.js';
import { PREPARE } from '../../src/core/statements.js';
import { WAIT_LOCK } from '../../src/leader/sql.js';

/**
 * The values of a statement that `inline` (statements.ts) wrote with literals, read back
 * against its template: each `$n` becomes the literal found at its place.
 */
/** Each template's pattern and the order of its placeholders, compiled once. */
const inlined = new Map<string, { re: RegExp; order: number[] }>();

function inlinedForm(template: string): { re: RegExp; order: number[] } {
  const known = inlined.get(template);
  if (known) return known;
  const order: number[] = [];
  const pattern = template
    .split(/(\$\d+)/)
    .map((part) => {
      const m = /^\$(\d+)$/.exec(part);
      if (!m) return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      order.push(Number(m[1]));
      return "(NULL|\\(-?\\d+\\)| ?E?'(?:[^']|'')*')";
    })
    .join('');
  const form = { re: new RegExp(`^${pattern}$`), order };
  inlined.set(template, form);
  return form;
}

/** What a set-up batch (core/prepare.ts `setupBatch`) asks: the pid it expects, the settings by version, the names read back. */
export function parseSetupBatch(text: string): {
  token: string;
  appName: string;
  announced: number;
  settings: { name: string; value: string; since: number }[];
  names: string[];
} {
  const [prepare = '', configure = '', settings = ''] = text.split(/;\n(?=\/\* pgleaderlock:)/);
  const [token, appName] = uninline(PREPARE, prepare) as [string, string];
  const announced = Number(/pg_backend_pid\(\) = \((\d+)\)/.exec(configure)?.[1] ?? Number.NaN);
  const calls = [
    ...configure.matchAll(
      /CASE WHEN c\.direct(?: AND c\.v >= (\d+))? THEN set_config\('([^']*)', '([^']*)', false\) END/g,
    ),
  ];
  const names = [...(/IN \(([^)]*)\)/.exec(settings)?.[1] ?? '').matchAll(/'([^']*)'/g)].map(
    (m) => m[1] as string,
  );
  return {
    token,
    appName,
    announced,
    settings: calls.map((m) => ({ name: m[2] as string, value: m[3] as string, since: Number(m[1] ?? 0) })),
    names,
  };
}

export function uninline(template: string, text: string): unknown[] {
  const { re, order } = inlinedForm(template);
  // the lock session tags each statement with its priority after its name, and with its id
  // when its application_name cannot carry it (sql.ts `tagged`)
  const found = re.exec(
    text.replace(
      /^(\/\* pgleaderlock:[a-z-]+ \*\/) \/\* p=-?\d+(?:, pending)? \*\/(?: \/\* id="(?:[^"\\]|\\.)*" \*\/)?/,
      '$1',
    ),
  );
  if (!found) throw new Error(`not an inlined form of the template: ${text.slice(0, 80)}`);
  const values: unknown[] = [];
  order.forEach((n, i) => {
    const lit = found[i + 1] as string;
    values[n - 1] =
      lit === 'NULL'
        ? null
        : lit.startsWith('(')
          ? Number(lit.slice(1, -1))
          : lit.startsWith(' E') || lit.startsWith('E')
            ? lit
                .replace(/^ ?E'|'$/g, '')
                .replaceAll("''", "'")
                .replaceAll('\\\\', '\\')
            : lit.replace(/^'|'$/g, '').replaceAll("''", "'");
  });
  return values;
}

export type Behaviour = 'normal' | 'error' | 'hang';

/** Lets every pending promise callback run (real macrotask turns, no time passes on the fake clock). */
export async function flush(turns = 10): Promise<void> {
  for (let i = 0; i < turns; i++) await new Promise((r) => setImmediate(r));
}

export class FakeClock implements Clock {
  private t = 0;
  private seq = 0;
  private timers = new Map<number, { due: number; fn: () => void }>();

  now(): number {
    return this.t;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.seq;
    this.timers.set(id, { due: this.t + ms, fn });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.timers.delete(handle as number);
  }
  get pending(): number {
    return this.timers.size;
  }
  /** Move time forward without firing anything: the process was frozen (GC pause, SIGSTOP, busy loop). */
  freeze(ms: number): void {
    this.t += ms;
  }
  /** Advance time by `ms`, firing due timers in order and letting the code react to each. */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    await flush();
    for (;;) {
      let next: [number, { due: number; fn: () => void }] | undefined;
      for (const entry of this.timers) {
        if (entry[1].due <= end && (!next || entry[1].due < next[1].due)) next = entry;
      }
      if (!next) break;
      this.timers.delete(next[0]);
      this.t = Math.max(this.t, next[1].due);
      next[1].fn();
      await flush();
    }
    this.t = end;
    await flush();
  }
}

class PendingQuery {
  constructor(
    readonly resolve: (v: { rows: unknown[] }) => void,
    readonly reject: (e: Error) => void,
  ) {}
}

export class FakeClient extends EventEmitter {
  /** The pid announced at connect: the backend's own, or, behind the session-mode pooler, the pooler's number. */
  readonly processID: number;
  /** The backend's pid (`pg_backend_pid()`). */
  readonly backendPid: number;
  ended = false;
  readonly queries: string[] = [];
  /** Ran LISTEN: receives the key channel's events. */
  listening = false;
  private readonly pending = new Set<PendingQuery>();
  readonly connection = { stream: { destroy: () => this.die(new Error('socket destroyed'), false) } };

  constructor(
    private readonly db: FakeDb,
    pid: number,
  ) {
    super();
    this.backendPid = pid;
    this.processID = db.sessionPooler ? POOLER_PID + pid : pid;
  }

  /** Session settings as the fake server applied them (pg_settings base units). */
  readonly settings = new Map<string, string>([
    ['idle_session_timeout', '0'],
    ['tcp_keepalives_idle', '7200'],
    ['tcp_keepalives_interval', '75'],
    ['tcp_keepalives_count', '9'],
    ['tcp_user_timeout', '0'],
    ['client_connection_check_interval', '0'],
  ]);

  query(text: string, values: unknown[] = []): Promise<{ rows: unknown[] }> {
    this.queries.push(text);
    if (this.ended) return Promise.reject(new Error('Client was closed and is not queryable'));
    const tag = /^\/\* pgleaderlock:([a-z-]+) \*\//.exec(text)?.[1] ?? 'other';
    this.db.beforeQuery?.(tag, this);
    if (this.db.sessionPooler) {
      const pooled = this.pooled(tag, text);
      if (pooled) return pooled;
    }
    if ((tag === 'wait-lock' || tag === 'try-lock') && this.db.unmarkedAcquisitions > 0) {
      // served by another backend than the session's (a pooler whose probe at connect passed)
      this.db.unmarkedAcquisitions -= 1;
      const row = {
        pid: this.backendPid + 1,
        same: false,
        held_before: false,
        ok: false,
        twice: null,
        idle: null,
      };
      return Promise.resolve({ rows: [{ ...row, waited_ms: 0 }] });
    }
    if (tag === 'wait-lock') return this.waitLock(values.length ? values : uninline(WAIT_LOCK, text));
    if (tag === 'late-grant') {
      const ok = this.db.holder === this;
      if (ok) this.db.notify(values);
      const row = { pid: this.backendPid, same: true, held_before: false, ok, twice: ok || null, idle: null };
      return Promise.resolve({ rows: [row] });
    }
    // the survey at connect (primary.ts) and a peer probe (peers.ts): the same answer
    if (tag === 'survey' || tag === 'peer') {
      if (tag === 'survey' && this.db.surveyBehaviour === 'hang') return new Promise(() => {});
      if (tag === 'survey' && this.db.surveyBehaviour === 'error')
        return Promise.reject(new Error('survey failed'));
      const recovery = this.db.inRecovery;
      return Promise.resolve({
        rows: [{ recovery, system_id: 'fake', timeline: recovery ? null : this.db.timeline }],
      });
    }
    if (tag === 'drained' && this.db.deliverDrained) {
      const [channel, payload] = values;
      if (typeof channel === 'string' && typeof payload === 'string') this.db.broadcast(channel, payload);
      return Promise.resolve({ rows: [{}] });
    }
    if (tag === 'listen') {
      this.listening = true;
      // the holder read after it, in the same round trip (key-channel.ts `listen`)
      return Promise.resolve({ rows: text.includes('/* pgleaderlock:holder */') ? this.holderRows() : [] });
    }
    if (tag === 'holder') return Promise.resolve({ rows: this.holderRows() });
    // several statements: pg resolves with one result each
    if (tag === 'prepare' && values.length === 0)
      return Promise.resolve(this.setupBatch(text) as unknown as { rows: unknown[] });
    if (tag === 'bump') return this.bump();
    if (tag === 'watch') return this.watch(text);
    const kind =
      tag === 'try-lock'
        ? 'tryLock'
        : tag === 'release'
          ? 'unlock'
          : tag === 'check' || tag === 'pending'
            ? 'check'
            : 'other';
    if (kind === 'other') return Promise.resolve({ rows: this.answerSetup(tag, values) });
    const behaviour = this.db.behaviour[kind];
    return new Promise((resolve, reject) => {
      const q = new PendingQuery(resolve, reject);
      if (behaviour === 'hang') {
        this.pending.add(q);
        return;
      }
      if (behaviour === 'error') {
        const err = Object.assign(new Error('simulated query failure'), { code: 'XX000' });
        reject(err);
        return;
      }
      const row: Record<string, unknown> = {
        same: true,
        held_before: false,
        idle: null,
        ...this.db.answer(kind, this),
      };
      if (row.ok) row.twice = true; // a grant takes the key a second time (sql.ts ON_GRANT)
      if (kind === 'tryLock' && row.ok && typeof values[3] === 'string') {
        const applied = this.db.pinnedIdleSessionTimeout ?? values[3];
        this.settings.set('idle_session_timeout', applied);
        row.idle = `${applied}ms`;
      }
      if (kind === 'tryLock' && row.ok) this.db.notify(values);
      if (kind === 'unlock' && row.ok) this.db.released(text);
      resolve({ rows: [row] });
    });
  }

  /**
   * Behind the session-mode pooler (`db.sessionPooler`): the statements of the pooler guard
   * (core/pooler.ts) and of a session that frees what it left (FREE_STRANDED). A session
   * keeps its backend, so the probe (a new client, a backend of its own) finds no marker and
   * no lock, unless `db.sessionPooler.probe` makes it fail or hang. Null: not such a statement.
   */
  private pooled(tag: string, text: string): Promise<{ rows: unknown[] }> | null {
    if (text.startsWith('SHOW pool_')) {
      return Promise.reject(
        Object.assign(new Error(`unrecognized configuration parameter "${text.slice(5)}"`), {
          code: '42704',
        }),
      );
    }
    if (tag === 'pinned') {
      return Promise.resolve({ rows: [{ pid: this.backendPid, same: true, held: this.db.holder === this }] });
    }
    if (tag === 'free-stranded') {
      const freed = this.db.holder === this;
      if (freed) this.db.answer('unlock', this);
      return Promise.resolve({ rows: freed ? [{ freed }] : [] });
    }
    if (tag !== 'probe') return null;
    const behaviour = this.db.sessionPooler?.probe ?? 'normal';
    if (behaviour === 'error') {
      return Promise.reject(Object.assign(new Error('simulated probe failure'), { code: 'XX000' }));
    }
    if (behaviour === 'hang') {
      return new Promise((resolve, reject) => this.pending.add(new PendingQuery(resolve, reject)));
    }
    // 'marked': the probe's backend carries another session's marker (not reset between clients)
    const marker = behaviour === 'marked' ? 'another-session' : null;
    return Promise.resolve({ rows: [{ pid: this.backendPid, marker, held: false }] });
  }

  /** Fencing: the next epoch, after `db.bumpDelayMs` on the fake clock. */
  private bump(): Promise<{ rows: unknown[] }> {
    const epoch = String(++this.db.epoch);
    const prev_released = this.db.epoch === 1 ? null : this.db.epochReleased;
    this.db.epochReleased = false;
    const ms = this.db.bumpDelayMs;
    const rows = [{ epoch, prev_released }];
    if (ms === 0 || !this.db.clock) return Promise.resolve({ rows });
    return new Promise((resolve) => this.db.clock?.setTimeout(() => resolve({ rows }), ms));
  }

  /** Wait mode: granted now if free, else queued until released or lock_timeout (fake clock). */
  private waitLock(values: unknown[]): Promise<{ rows: unknown[] }> {
    const began = this.db.clock?.now() ?? 0;
    const grant = (): { rows: unknown[] } => {
      this.db.holder = this;
      const idle = typeof values[3] === 'string' ? values[3] : null;
      if (idle) this.settings.set('idle_session_timeout', idle);
      const waited_ms = (this.db.clock?.now() ?? 0) - began;
      this.db.notify(values);
      if (this.db.freezeClientOnGrantMs > 0) this.db.clock?.freeze(this.db.freezeClientOnGrantMs);
      const row = { ok: true, twice: true, same: true, held_before: false, pid: this.backendPid, waited_ms };
      return { rows: [{ ...row, idle: idle ? `${idle}ms` : null }] };
    };
    if (this.db.holder === null || this.db.holder === this) return Promise.resolve(grant());
    return new Promise((resolve, reject) => {
      const q = new PendingQuery(resolve, reject);
      this.pending.add(q);
      const sliceMs = Number(this.settings.get('lock_timeout') ?? 0);
      const timer =
        sliceMs > 0
          ? this.db.clock?.setTimeout(() => {
              this.pending.delete(q);
              this.db.waiters = this.db.waiters.filter((w) => w.q !== q);
              // PostgreSQL's race: granted just before the timeout was processed; the error
              // is raised anyway and the session keeps the lock
              if (this.db.grantRacesTimeout && this.db.holder === null) this.db.holder = this;
              reject(Object.assign(new Error('canceling statement due to lock timeout'), { code: '55P03' }));
            }, sliceMs)
          : undefined;
      this.db.waiters.push({
        q,
        grant: () => {
          this.db.clock?.clearTimeout(timer);
          this.pending.delete(q);
          resolve(grant());
        },
      });
    });
  }

  /**
   * The partition ring watch (partitions/watch.ts): its wait for a member lock queues until
   * lock_timeout (no member here ever dies), or until the session dies; its unlocks free
   * nothing. This fake has no cancel key, so cancels never reach it: a path that drops them.
   */
  private watch(text: string): Promise<{ rows: unknown[] }> {
    if (!text.includes('pg_advisory_lock(')) return Promise.resolve({ rows: [{ freed: false }] });
    return new Promise((resolve, reject) => {
      const q = new PendingQuery(resolve, reject);
      this.pending.add(q);
      const sliceMs = Number(this.settings.get('lock_timeout') ?? 0);
      if (sliceMs > 0)
        this.db.clock?.setTimeout(() => {
          if (!this.pending.delete(q)) return;
          reject(Object.assign(new Error('canceling statement due to lock timeout'), { code: '55P03' }));
        }, sliceMs);
    });
  }

  private holderRows(): unknown[] {
    const h = this.db.holder;
    return h ? [{ pid: h.backendPid, application_name: null }] : [];
  }

  /**
   * The set-up in one round trip (core/prepare.ts `setupBatch`): PREPARE, the settings where
   * the backend is the one announced (and not in recovery), the read-back.
   */
  private setupBatch(text: string): { rows: unknown[] }[] {
    const batch = parseSetupBatch(text);
    const prepared = this.answerSetup('prepare', []);
    const direct = batch.announced === this.backendPid && !this.db.inRecovery;
    if (direct) {
      const wanted = batch.settings.filter((x) => x.since <= this.db.serverVersion);
      this.answerSetup(
        'configure',
        wanted.flatMap((x) => [x.name, x.value]),
      );
    }
    const read = this.answerSetup('settings', [batch.names]);
    return [{ rows: prepared }, { rows: [{ applied: direct }] }, { rows: read }];
  }

  /** Connection setup: version/recovery/pid, set_config of session settings, read-back. */
  private answerSetup(tag: string, values: unknown[]): unknown[] {
    if (tag === 'prepare') {
      return [{ version: this.db.serverVersion, recovery: this.db.inRecovery, pid: this.backendPid }];
    }
    if (tag === 'settings') {
      const names = (values[0] as string[]) ?? [];
      return names
        .filter((n) => this.settings.has(n))
        .map((name) => ({ name, setting: this.settings.get(name) }));
    }
    if (tag === 'configure') {
      for (let i = 0; i + 1 < values.length; i += 2) {
        const name = String(values[i]);
        const value = String(values[i + 1]);
        // keepalive settings in seconds; user timeout in ms; pinned values win
        this.settings.set(name, this.db.pinned.get(name) ?? value);
      }
      return [{}];
    }
    return [{}];
  }

  /** Ownership checks run on this client (not the who-holds query at connect). */
  get checks(): number {
    return this.queries.filter((q) => /^\/\* pgleaderlock:check/.test(q)).length;
  }

  owns(q: PendingQuery): boolean {
    return this.pending.has(q);
  }

  end(): Promise<void> {
    if (!this.ended) this.die(null, true);
    return Promise.resolve();
  }

  /** The server side goes away (terminate backend / network failure). */
  kill(message = 'terminating connection due to administrator command'): void {
    this.die(Object.assign(new Error(message), { code: '57P01' }), false);
  }

  private die(err: Error | null, graceful: boolean): void {
    if (this.ended) return;
    this.ended = true;
    this.db.releasedBy(this);
    for (const q of this.pending) q.reject(err ?? new Error('Connection terminated'));
    this.pending.clear();
    if (!graceful && err) {
      this.emit('error', err);
      this.emit('error', new Error('Connection terminated unexpectedly'));
    }
    this.emit('end');
  }
}

/** What the session-mode pooler adds to a backend pid to make the pid it announces (its own numbers). */
const POOLER_PID = 900_000;

export class FakeDb {
  holder: FakeClient | null = null;
  /**
   * A pooler in session mode in the path (each client keeps one backend, announces a pid
   * of the pooler's own): the lock's pooler guard probes; `probe` decides how its probes go
   * (`marked`: the probe finds another session's marker, a definite refusal).
   */
  sessionPooler: { probe: Behaviour | 'marked' } | null = null;
  /**
   * The next so many acquisitions (poll or wait) run on a backend without the session's
   * marker: a pooler that shares backends whose probe at connect passed (it handed the probe
   * a backend of its own, as PgBouncer in transaction mode does on a loaded machine).
   */
  unmarkedAcquisitions = 0;
  /** Told of each statement as a client receives it (its tag, `other` if none), before it is answered. */
  beforeQuery: ((tag: string, client: FakeClient) => void) | null = null;
  readonly clients: FakeClient[] = [];
  connectBehaviour: Behaviour = 'normal';
  /** The survey at connect (primary.ts): `hang`, a server that accepted the connection but does not finish it. */
  surveyBehaviour: Behaviour = 'normal';
  behaviour: Record<'tryLock' | 'unlock' | 'check', Behaviour> = {
    tryLock: 'normal',
    unlock: 'normal',
    check: 'normal',
  };
  /** When true, the health check reports the lock as not held (silent loss). */
  silentLoss = false;
  serverVersion = 160000;
  inRecovery = false;
  /** The server's timeline (primary.ts reads it from the WAL file name). */
  timeline = 1;
  /** Fencing: the last epoch handed out, whether its holder released it, how long a bump takes (fake clock). */
  epoch = 0;
  epochReleased = false;
  /**
   * Deliver the `drained` events (proof of drain, key-channel.ts `announceDrained`) to the
   * listening sessions; off: sent and lost, as the fake always did.
   */
  deliverDrained = false;
  /** Every event sent on a key channel, in order (payloads). */
  readonly events: string[] = [];
  bumpDelayMs = 0;
  /**
   * How long the server takes to notice a closed session and free its lock (fake clock):
   * until then the closed client still holds it.
   */
  releaseDelayMs = 0;
  /** Wait mode: a lock freed as a wait slice ends is granted although the wait fails with 55P03. */
  grantRacesTimeout = false;
  /** Wait mode: the client process freezes this long between a grant and reading it. */
  freezeClientOnGrantMs = 0;
  /** Settings the "managed service" does not let a session change. */
  readonly pinned = new Map<string, string>();
  pinnedIdleSessionTimeout: string | null = null;
  private nextPid = 1000;

  readonly connect = (): Promise<pg.Client> => {
    if (this.connectBehaviour === 'error') {
      return Promise.reject(
        Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }),
      );
    }
    if (this.connectBehaviour === 'hang') return new Promise(() => {});
    const c = new FakeClient(this, this.nextPid++);
    this.clients.push(c);
    return Promise.resolve(c as unknown as pg.Client);
  };

  /** A competitor takes the lock. */
  takeByOther(): void {
    this.holder = new FakeClient(this, 1);
  }

  get open(): FakeClient[] {
    return this.clients.filter((c) => !c.ended);
  }

  get last(): FakeClient {
    const c = this.clients.at(-1);
    if (!c) throw new Error('no client yet');
    return c;
  }

  /** Sessions queued in pg_advisory_lock, in order. */
  waiters: { q: PendingQuery; grant: () => void }[] = [];

  constructor(readonly clock?: FakeClock) {}

  /** A grant's `acquired` event ($5 on channel $6), delivered to every listening client. */
  notify(values: unknown[]): void {
    const [payload, channel] = [values[4], values[5]];
    if (typeof payload === 'string' && typeof channel === 'string') this.broadcast(channel, payload);
  }

  /** A clean release statement: its `released` event (and the fencing mark) before the unlock. */
  released(sql: string): void {
    const m = /pg_notify\('([^']+)', '((?:[^']|'')*)'\)/.exec(sql);
    if (m?.[1] && m[2] !== undefined) this.broadcast(m[1], m[2].replaceAll("''", "'"));
    if (sql.includes('SET released = true')) this.epochReleased = true;
  }

  broadcast(channel: string, payload: string): void {
    this.events.push(payload);
    for (const c of this.clients) if (c.listening && !c.ended) c.emit('notification', { channel, payload });
  }

  releasedBy(c: FakeClient): void {
    this.waiters = this.waiters.filter((w) => !c.owns(w.q));
    if (this.holder === c && this.releaseDelayMs > 0 && this.clock) {
      this.clock.setTimeout(() => this.freeFrom(c), this.releaseDelayMs);
      return;
    }
    this.freeFrom(c);
  }

  private freeFrom(c: FakeClient): void {
    if (this.holder === c) {
      this.holder = null;
      this.waiters.shift()?.grant();
    }
  }

  answer(kind: 'tryLock' | 'unlock' | 'check', c: FakeClient): Record<string, unknown> {
    switch (kind) {
      case 'tryLock':
        if (this.holder === null || this.holder === c) {
          this.holder = c;
          return { ok: true, pid: c.backendPid };
        }
        return { ok: false, pid: c.backendPid };
      case 'unlock':
        if (this.holder === c) {
          this.holder = null;
          queueMicrotask(() => {
            if (this.holder === null) this.waiters.shift()?.grant();
          });
          return { ok: true };
        }
        return { ok: false };
      case 'check':
        return { pid: c.backendPid, held: this.holder === c && !this.silentLoss, recovery: this.inRecovery };
    }
  }
}

/**
 * A simulated PostgreSQL for the statements the library runs: backends and how they end
 * (here), session advisory locks and their wait queue (pg/locks.ts), pg_locks and
 * pg_stat_activity as the library reads them (pg/catalog.ts, pg/text.ts), LISTEN/NOTIFY
 * (pg/notify.ts), the statements themselves (pg/statements.ts). A backend ends by
 * `pg_terminate_backend`, a restart, idle_session_timeout, keepalive, tcp_user_timeout or
 * its client gone.
 */
import { Backend, type Peer, type ReleaseCause, type Reply } from './pg/backend.js';
import type { Engine } from './pg/engine.js';
import { LockTable } from './pg/locks.js';
import { commitNotify, type Note } from './pg/notify.js';
import { execute } from './pg/statements.js';
import { showMs, shownQuery } from './pg/text.js';
import type { Random } from './random.js';
import type { World } from './world.js';

export {
  Backend,
  INSTANT,
  type Peer,
  type ReleaseCause,
  type Reply,
  type Result,
  type SqlError,
} from './pg/backend.js';
export { cleanAscii, shownApplicationName } from './pg/text.js';

export interface ServerHooks {
  /** The key changed hands (holder null: free). */
  onHolder(key: string, holder: Backend | null, cause: ReleaseCause | null): void;
  /** A statement the model does not know. */
  onGap(what: string): void;
}

export class SimServer implements Engine {
  up = true;
  /** Cut off from every client without a reset (failover.ts): a new connection never answers. */
  unreachable = false;
  /** A hot standby (pg_is_in_recovery()): it grants advisory locks, refuses LISTEN and NOTIFY (25006). */
  recovery = false;
  /** The timeline a primary is on; a promotion starts a newer one. */
  timeline = 1;
  private nextPid: number;
  readonly backends = new Map<number, Backend>();
  readonly locks: LockTable;

  constructor(
    readonly world: World,
    private readonly rng: Random,
    private readonly hooks: ServerHooks,
    /** Its first backend's pid (a second server's pids differ from the first's). */
    firstPid = 100,
  ) {
    this.nextPid = firstPid;
    this.locks = new LockTable(world, rng, (key, holder, cause) => hooks.onHolder(key, holder, cause));
  }

  holderOf(key: string): Backend | null {
    return this.locks.holderOf(key);
  }

  /** A new backend for a connection that reached the server. */
  open(owner: string, link: Peer): Backend {
    const b = new Backend(this.nextPid++, owner, link);
    b.lastRecv = this.world.now;
    b.startedAt = this.world.now;
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
      reply = execute(this, b, text, values);
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

  /** DISCARD ALL (a session pooler's server_reset_query): locks, marker, name, settings, LISTENs gone. */
  discard(b: Backend, cause: ReleaseCause): void {
    if (!b.alive) return;
    this.locks.unlockAll(b, cause);
    b.marker = null;
    b.appName = '';
    b.listening.clear();
    for (const name of b.settings.keys()) b.settings.set(name, 0);
    this.idle(b);
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

  /** pg_promote(): out of recovery, on a new timeline; its sessions and their locks stay. */
  promote(timeline: number): void {
    this.recovery = false;
    this.timeline = timeline;
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

  finish(b: Backend, reply: Reply): void {
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

  notify(notes: Note[]): void {
    commitNotify(this.world, this.backends.values(), notes);
  }

  set(b: Backend, name: string, value: string): string {
    if (!b.settings.has(name)) return value;
    const n = Number(value);
    b.settings.set(name, n);
    if (name === 'idle_session_timeout' && !b.busy) this.idle(b);
    return name.endsWith('_timeout') || name === 'client_connection_check_interval' ? showMs(n) : value;
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
    if (b.waiting) this.locks.leaveQueue(b);
    this.locks.unlockAll(b, cause);
    b.listening.clear();
    b.link.serverGone();
  }
}

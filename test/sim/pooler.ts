/**
 * A simulated connection pooler (PgBouncer's model) between the clients and the server.
 * It answers each client's startup itself, announcing a pid of its own, and serves the
 * client's statements on server connections (backends) of a pool of `size`, `warm` of
 * them opened at the start (min_pool_size), more opened as clients wait:
 *  - session mode: a backend is pinned to the client from its first statement until it
 *    leaves; then it is reset (DISCARD ALL: its advisory locks, marker, name, settings and
 *    LISTENs go) and returned to the pool, or closed if a statement was still running;
 *  - transaction and statement mode: each statement (every statement of the library is
 *    one message that ends outside a transaction, so the two modes are one here) runs on
 *    an idle backend: the most recently used first (PgBouncer's default) or the least
 *    recently used (`server_round_robin = 1`: in turn); nothing is reset between clients,
 *    so a lock stays on the pooled backend after its client has gone.
 * A client waits (in arrival order) while every backend is busy. A backend that exits
 * ends the client linked to it (session mode: the one pinned to it); notifications that
 * reach an idle pooled backend are lost. The pooler itself never fails; its keepalive
 * toward clients is the OS default (hours): a blackholed client is never noticed.
 */
import { type Front, Link, type Packet } from './net.js';
import { Random } from './random.js';
import { Backend, type Peer, type ReleaseCause, type SimServer } from './server.js';
import type { World } from './world.js';

export interface PoolerProfile {
  mode: 'session' | 'transaction' | 'statement';
  /** Which idle backend a statement gets: most recently used, or in turn. */
  choice: 'mru' | 'rr';
  size: number;
  warm: number;
}

/**
 * Session mode gets a pool with room for every candidate's session, the leader's kept probe
 * connection and the probes of a connect (docs/safety.md: what session mode costs); the
 * sharing modes get any size, 1 included.
 */
export function drawPooler(rng: Random, clients: number): PoolerProfile {
  const mode = rng.pick(['session', 'session', 'transaction', 'statement'] as const);
  const sizes = [1, 2, 3, 4, 5, 6, 7, 8, 20];
  const size = mode === 'session' ? Math.max(rng.pick(sizes), 2 * clients + 2) : rng.pick(sizes);
  return { mode, choice: rng.pick(['mru', 'rr'] as const), size, warm: rng.pick([0, 1, size, size]) };
}

/**
 * The pooler a scenario's candidates (or workers) connect through, or null (directly): one seed in four,
 * from a stream of its own (the other seeds run as they did before poolers were modelled).
 */
export function poolerFor(seed: number, candidates: number): PoolerProfile | null {
  // SIM_POOLERS=off: every connection direct (how the seeds cited before poolers were modelled replay)
  if (process.env.SIM_POOLERS === 'off') return null;
  const rng = new Random((seed ^ 0x5ee0f00d) >>> 0);
  return rng.chance(0.25) ? drawPooler(rng, candidates) : null;
}

/** A shared-backend mode: session advisory locks do not exclude (the library must refuse it). */
export function sharesBackends(p: PoolerProfile | null): boolean {
  return p !== null && p.mode !== 'session';
}

/** A pooler's time to pass a message between a client's connection and a backend. */
const HOP_MS = 0.05;

interface PoolClient {
  handle: Backend;
  conn: ServerConn | null;
  pending: { text: string; values: unknown[] } | null;
}

/** The pooler's connection to one backend. */
class ServerConn implements Peer {
  backend: Backend | null = null;
  client: PoolClient | null = null;
  /** A statement of the linked client is on its way or running. */
  inFlight = false;
  closed = false;
  /** When it last went idle (a sequence number). */
  released = 0;

  constructor(private readonly pooler: Pooler) {}

  /** As the checker reads it: a pinned client's blackholed link hears nothing either. */
  get state(): 'open' | 'blackhole' | 'closed' {
    if (this.closed) return 'closed';
    return this.client?.handle.link.state === 'blackhole' ? 'blackhole' : 'open';
  }

  toClient(packet: Packet): void {
    this.pooler.hop(() => this.pooler.fromServer(this, packet));
  }

  serverGone(): void {
    this.closed = true;
    this.pooler.hop(() => this.pooler.lost(this));
  }
}

export class Pooler implements Front {
  readonly up = true;
  private nextPid = 900_000;
  private seq = 0;
  private readonly conns: ServerConn[] = [];
  private readonly clients = new Map<Backend, PoolClient>();
  private readonly waiting: PoolClient[] = [];
  private retrying = false;

  constructor(
    readonly world: World,
    readonly server: SimServer,
    readonly profile: PoolerProfile,
  ) {
    for (let i = 0; i < profile.warm; i++) this.openConn();
  }

  get session(): boolean {
    return this.profile.mode === 'session';
  }

  hop(fn: () => void): void {
    this.world.schedule(HOP_MS, null, 'server', fn);
  }

  /** A client's startup, answered here: a pid of the pooler's own. */
  open(owner: string, link: Link): Backend {
    const handle = new Backend(this.nextPid++, owner, link);
    this.clients.set(handle, { handle, conn: null, pending: null });
    return handle;
  }

  receive(handle: Backend, text: string, values: unknown[]): void {
    const c = this.clients.get(handle);
    if (!c) return;
    c.pending = { text, values };
    this.waiting.push(c);
    this.pump();
  }

  /** The client is gone (Terminate, FIN, reset): its backend reset and pooled, or closed mid-statement. */
  peerClosed(handle: Backend, cause: ReleaseCause): void {
    const c = this.clients.get(handle);
    if (!c) return;
    this.clients.delete(handle);
    handle.alive = false;
    const w = this.waiting.indexOf(c);
    if (w >= 0) this.waiting.splice(w, 1);
    const conn = c.conn;
    c.conn = null;
    if (conn) {
      conn.client = null;
      const b = conn.backend;
      if (conn.inFlight || !b) {
        // a statement running: the server connection is closed (the backend sees the FIN)
        conn.closed = true;
        this.drop(conn);
        if (b) this.hop(() => this.server.peerClosed(b, cause));
      } else if (this.session) {
        conn.released = 0; // not handed out before its reset
        this.hop(() => {
          this.server.discard(b, cause);
          b.owner = 'pool';
          this.idle(conn);
        });
      }
    }
    handle.link.serverGone();
    this.pump();
  }

  blackholed(): void {}

  unacked(): void {}

  /** A packet from a backend: to the client linked to it (none: lost); a reply ends a transaction-mode link. */
  fromServer(conn: ServerConn, packet: Packet): void {
    const c = conn.client;
    if (!c) return;
    c.handle.link.toClient(packet);
    if (packet.reply === null || ('error' in packet.reply && packet.reply.error.fatal)) return;
    conn.inFlight = false;
    if (!this.session) {
      conn.client = null;
      c.conn = null;
      this.idle(conn);
    }
  }

  /** Its backend exited: the client linked to it is closed (after what was already sent). */
  lost(conn: ServerConn): void {
    this.drop(conn);
    const c = conn.client;
    conn.client = null;
    if (c) {
      this.clients.delete(c.handle);
      c.handle.alive = false;
      const w = this.waiting.indexOf(c);
      if (w >= 0) this.waiting.splice(w, 1);
      c.handle.link.serverGone();
    }
    this.pump();
  }

  /** The backend a fault aims at for `handle`: the one pinned or linked to it, else one of the pool. */
  backendFor(handle: Backend | null | undefined, key: string, rng: Random): Backend | null {
    const c = handle ? this.clients.get(handle) : undefined;
    if (c?.conn?.backend) return c.conn.backend;
    const holder = this.server.holderOf(key);
    if (holder && this.conns.some((x) => x.backend === holder)) return holder;
    const open = this.conns.filter((x) => x.backend?.alive);
    return open.length > 0 ? (rng.pick(open).backend as Backend) : null;
  }

  private idle(conn: ServerConn): void {
    conn.released = ++this.seq;
    this.pump();
  }

  private drop(conn: ServerConn): void {
    const i = this.conns.indexOf(conn);
    if (i >= 0) this.conns.splice(i, 1);
  }

  private openConn(): void {
    const conn = new ServerConn(this);
    this.conns.push(conn);
    this.hop(() => {
      if (!this.server.up) {
        // refused: retried while clients wait
        this.drop(conn);
        this.retryLater();
        return;
      }
      conn.backend = this.server.open('pool', conn);
      this.hop(() => this.idle(conn));
    });
  }

  private retryLater(): void {
    if (this.retrying) return;
    this.retrying = true;
    this.world.schedule(100, null, 'server', () => {
      this.retrying = false;
      this.pump();
    });
  }

  /** Serve waiting clients in arrival order while backends are free (a pinned client needs none). */
  private pump(): void {
    let unserved = 0;
    for (const c of [...this.waiting]) {
      const conn = c.conn ?? this.pick();
      if (!conn) {
        unserved++;
        const opening = this.conns.filter((x) => !x.backend).length;
        if (this.conns.length < this.profile.size && opening < unserved) this.openConn();
        continue;
      }
      this.waiting.splice(this.waiting.indexOf(c), 1);
      const q = c.pending;
      c.pending = null;
      if (!q || !conn.backend) continue;
      conn.client = c;
      c.conn = conn;
      conn.inFlight = true;
      if (this.session) conn.backend.owner = c.handle.owner;
      const b = conn.backend;
      this.world.log(
        () => `pooler: ${c.handle.owner} #${c.handle.pid} on pid ${b.pid}: ${q.text.slice(0, 40)}`,
      );
      this.hop(() => {
        if (b.alive) this.server.receive(b, q.text, q.values);
      });
    }
  }

  /** An idle backend: the most recently used, or the least (in turn). */
  private pick(): ServerConn | null {
    let best: ServerConn | null = null;
    for (const x of this.conns) {
      if (x.client || !x.backend || x.closed || !x.backend.alive || x.released === 0) continue;
      if (!best || (this.profile.choice === 'mru' ? x.released > best.released : x.released < best.released))
        best = x;
    }
    return best;
  }
}

/** The client-side link of a backend: its own (direct), or the pooled client's it serves now. */
export function clientLink(b: Backend): Link | null {
  if (b.link instanceof Link) return b.link;
  if (b.link instanceof ServerConn) return (b.link.client?.handle.link as Link | undefined) ?? null;
  return null;
}

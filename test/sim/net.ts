/**
 * The simulated network and client side: a `Link` is one TCP connection between a
 * simulated process and a backend (messages in order each way, each delayed by the run's
 * network profile; it can be reset or blackholed), and `SimClient` is what the library's
 * `connect` hook returns: the part of `pg.Client` the library uses (query with a queue of
 * its own, end, the 'error'/'end'/'notification' events, processID, the socket's destroy).
 * No cancel key: a cancel falls back to closing the connection, as with a proxy that drops cancels.
 */
import { EventEmitter } from 'node:events';
import type { Random } from './random.js';
import type { Backend, ReleaseCause, Reply } from './server.js';
import type { Proc, World } from './world.js';

export interface Packet {
  notifications: { channel: string; payload: string }[];
  /** null: notifications only (an idle session). */
  reply: Reply | null;
}

/** What a client's link reaches: the server itself, or a pooler in front of it (pooler.ts). */
export interface Front {
  readonly up: boolean;
  /** Cut off without a reset: a connection's first packet is lost, and it never answers. */
  readonly unreachable?: boolean;
  /** A connection that reached it: the session it serves the link with. */
  open(owner: string, link: Link): Backend;
  receive(b: Backend, text: string, values: unknown[]): void;
  peerClosed(b: Backend, cause: ReleaseCause): void;
  blackholed(b: Backend): void;
  unacked(b: Backend): void;
}

/** The run's network: how long a message takes. */
export interface NetProfile {
  /** Most messages take 0.02 ms to this. */
  baseMs: number;
  /** Chance that a message is slow, and how slow it can be. */
  spikeP: number;
  spikeMs: number;
}

export class Link {
  state: 'open' | 'blackhole' | 'closed' = 'open';
  backend: Backend | null = null;
  private lastToServer = 0;
  private lastToClient = 0;

  constructor(
    readonly world: World,
    readonly server: Front,
    readonly rng: Random,
    readonly net: NetProfile,
    readonly client: SimClient,
  ) {}

  delay(): number {
    const d = this.rng.between(0.02, this.net.baseMs);
    return this.rng.chance(this.net.spikeP) ? d + this.rng.between(0, this.net.spikeMs) : d;
  }

  /** Client to server, in order. */
  toServer(fn: (b: Backend) => void): void {
    if (this.state !== 'open') return;
    const at = Math.max(this.lastToServer, this.world.now + this.delay());
    this.lastToServer = at;
    this.world.schedule(at - this.world.now, null, 'server', () => {
      if (this.state === 'open' && this.backend?.alive) fn(this.backend);
    });
  }

  /** Server to client, in order; read by the process when it runs. */
  toClient(packet: Packet): void {
    if (this.state === 'blackhole') {
      if (this.backend) this.server.unacked(this.backend);
      return;
    }
    if (this.state !== 'open') return;
    const at = Math.max(this.lastToClient, this.world.now + this.delay());
    this.lastToClient = at;
    this.world.schedule(at - this.world.now, this.client.proc, 'io', () => {
      if (this.state !== 'blackhole') this.client.receive(packet);
    });
  }

  /** The backend exited: the client reads EOF after what was already sent. */
  serverGone(): void {
    if (this.state !== 'open') return;
    this.state = 'closed';
    const at = Math.max(this.lastToClient, this.world.now + this.delay());
    this.world.schedule(at - this.world.now, this.client.proc, 'io', () => this.client.eof());
  }

  /** The client's side closed (end, destroy, process gone): the server sees FIN after a delay. */
  clientGone(cause: ReleaseCause): void {
    if (this.state !== 'open') {
      this.state = this.state === 'blackhole' ? 'blackhole' : 'closed';
      return;
    }
    this.state = 'closed';
    const b = this.backend;
    const at = Math.max(this.lastToServer, this.world.now + this.delay());
    this.world.schedule(at - this.world.now, null, 'server', () => {
      if (b?.alive) this.server.peerClosed(b, cause);
    });
  }

  /** A reset: both ends learn, each after a delay. */
  reset(): void {
    if (this.state !== 'open') return;
    this.state = 'closed';
    const b = this.backend;
    this.world.schedule(this.delay(), null, 'server', () => {
      if (b?.alive) this.server.peerClosed(b, 'reset');
    });
    this.world.schedule(this.delay(), this.client.proc, 'io', () =>
      this.client.fail(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' })),
    );
  }

  /** Every packet either way is lost from now on; neither end is told. */
  blackhole(): void {
    if (this.state !== 'open') return;
    this.state = 'blackhole';
    if (this.backend?.alive) this.server.blackholed(this.backend);
  }
}

interface Pending {
  text: string;
  values: unknown[];
  resolve: (r: unknown) => void;
  reject: (e: Error) => void;
}

export class SimClient extends EventEmitter {
  processID: number | null = null;
  _ending = false;
  _queryable = true;
  ended = false;
  link!: Link;
  private readonly queue: Pending[] = [];
  private active: Pending | null = null;
  private endWaiters: (() => void)[] = [];
  readonly connection = {
    stream: {
      destroy: () => this.destroy(),
      unref: () => {},
    },
  };

  /** Told of an 'error' nobody listens to (it would crash the process). */
  onUnhandled: ((err: Error) => void) | null = null;
  /** What the client ran, for reports. */
  readonly history: string[] = [];

  constructor(readonly proc: Proc) {
    super();
  }

  query(text: string, values: unknown[] = []): Promise<unknown> {
    if (this.ended || this._ending)
      return Promise.reject(new Error('Client was closed and is not queryable'));
    return new Promise((resolve, reject) => {
      this.queue.push({ text, values, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    if (this.active || this.ended) return;
    const next = this.queue.shift();
    if (!next) return;
    this.active = next;
    this.history.push(next.text.slice(0, 40));
    this.link.toServer((b) => this.link.server.receive(b, next.text, next.values));
  }

  /** A packet from the server: notifications first (emitted as read), then the reply. */
  receive(packet: Packet): void {
    if (this.ended) return;
    for (const n of packet.notifications)
      this.emit('notification', { channel: n.channel, payload: n.payload });
    const reply = packet.reply;
    if (!reply) return;
    if ('error' in reply && reply.error.fatal) {
      this.fail(Object.assign(new Error(reply.error.message), { code: reply.error.code, severity: 'FATAL' }));
      return;
    }
    const q = this.active;
    this.active = null;
    if (q) {
      if ('error' in reply)
        q.reject(Object.assign(new Error(reply.error.message), { code: reply.error.code }));
      else q.resolve(reply.result);
    }
    this.pump();
  }

  /** The connection failed (a FATAL from the server, a reset): as pg reports it. */
  fail(err: Error): void {
    if (this.ended) return;
    this.ended = true;
    this._queryable = false;
    const q = this.active;
    this.active = null;
    if (q) q.reject(err);
    else if (!this._ending) {
      // with no listener, Node throws: the process would crash (the run reports it)
      if (this.listenerCount('error') === 0) this.onUnhandled?.(err);
      else {
        this.emit('error', err);
        this.emit('error', new Error('Connection terminated unexpectedly'));
      }
    }
    this.rejectQueued();
    this.link.state = 'closed';
    this.finish();
  }

  /** EOF from the server (after its FATAL, or the answer to our Terminate). */
  eof(): void {
    if (this.ended) return;
    if (this._ending) {
      this.ended = true;
      this.active?.reject(new Error('Connection terminated'));
      this.active = null;
      this.rejectQueued();
      this.finish();
      return;
    }
    this.fail(new Error('Connection terminated unexpectedly'));
  }

  end(): Promise<void> {
    if (this.ended) return Promise.resolve();
    const done = new Promise<void>((resolve) => this.endWaiters.push(resolve));
    if (!this._ending) {
      this._ending = true;
      this.rejectQueued();
      // Terminate and FIN: an idle backend ends at once, a busy one as peerClosed says; then EOF
      this.link.toServer((b) => this.link.server.peerClosed(b, 'client'));
    }
    return done;
  }

  /** The socket destroyed here: nothing more is read; the server sees the FIN. */
  destroy(): void {
    if (this.ended) return;
    this.ended = true;
    this._queryable = false;
    this.link.clientGone('client');
    this.active?.reject(new Error('Connection terminated'));
    this.active = null;
    this.rejectQueued();
    this.finish();
  }

  private rejectQueued(): void {
    for (const q of this.queue.splice(0)) q.reject(new Error('Client was closed and is not queryable'));
  }

  private finish(): void {
    this.emit('end');
    for (const fn of this.endWaiters.splice(0)) fn();
  }
}

/** The `connect` hook of a simulated process: a client connected after a round trip, or ECONNREFUSED. */
export function connector(
  world: World,
  server: Front,
  rng: Random,
  net: NetProfile,
  proc: Proc,
  owner: string,
  onClient: (c: SimClient) => void,
): () => Promise<SimClient> {
  return () =>
    new Promise((resolve, reject) => {
      const client = new SimClient(proc);
      const link = new Link(world, server, rng, net, client);
      client.link = link;
      world.schedule(link.delay(), null, 'server', () => {
        // the connect hangs until the library's deadline (the server, or this process, unreachable)
        if (server.unreachable || proc.cutOff) return;
        if (!server.up) {
          world.schedule(link.delay(), proc, 'io', () =>
            reject(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })),
          );
          return;
        }
        const b = server.open(owner, link);
        link.backend = b;
        client.processID = b.pid;
        world.schedule(link.delay(), proc, 'io', () => {
          if (!b.alive) {
            reject(Object.assign(new Error('Connection terminated unexpectedly'), {}));
            return;
          }
          onClient(client);
          resolve(client);
        });
      });
    });
}

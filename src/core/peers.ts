/**
 * The split-brain guard (docs/safety.md, "Primary failover"). A leader whose connection
 * string lists several hosts watches the other hosts while it leads: every
 * `PEER_INTERVAL_MS` it asks each (on a connection kept open for it) whether it is a
 * primary and on which timeline. A primary on a newer timeline than the leader's server
 * means a standby was promoted while the old primary is still up: the leader's server no
 * longer decides who leads, and `onPromotion` ends the leadership at once.
 *
 * Bound: a promotion of a host the leader can reach is seen within `PEER_BOUND_MS` (one
 * interval plus one probe deadline: a round waits for its slowest probe) plus a round
 * trip. A new leader that finds an old primary still up adds that bound to its takeover
 * delay. The probes are one tiny statement per peer every 100 ms, on connections kept
 * open, by the leader only.
 */
import type pg from 'pg';
import type { Clock } from './clock.js';
import { destroyClient } from './connect.js';
import type { Endpoint } from './endpoints.js';
import { isRefused, LockError, sqlStateOf } from './errors.js';

export const PEER_INTERVAL_MS = 100;
/** Deadline of one probe (connecting included). */
export const PEER_TIMEOUT_MS = 250;
/** Longest time for a leader to see a promotion of a host it can reach. */
export const PEER_BOUND_MS = PEER_INTERVAL_MS + PEER_TIMEOUT_MS;

/**
 * The split-brain delay, one rule for both elections (docs/safety.md and docs/partitions.md,
 * "Primary failover"): a term taken on a new primary while an older primary is still up
 * opens only after a leader or worker there has seen the promotion (its peer watch's bound:
 * one round `peerIntervalMs` plus one probe's deadline) and then stopped its work
 * (`takeoverDelayMs`). Nothing heard on this server proves the other one stopped, so a clean
 * handover or a proof of drain here does not shorten it, and `takeoverDelayMs: 0` does not
 * remove the bound. `peerIntervalMs` is the one value that differs: `PEER_INTERVAL_MS`
 * (100 ms) for `LeaderLock`, whose one leader watches; a partition worker's
 * `healthIntervalMs`, because every worker watches (a 100 ms round would multiply the probes
 * by the workers).
 */
export function splitBrainDelayMs(takeoverDelayMs: number, peerIntervalMs: number): number {
  return takeoverDelayMs + peerIntervalMs + PEER_TIMEOUT_MS;
}

/**
 * How long a term waits after its grant, one rule for both elections (docs/safety.md,
 * "Takeover delay"): 0 after a clean handover (the previous holder's release, or a proof of
 * drain, seen on this server), `takeoverDelayMs` otherwise; while another primary is up,
 * `splitBrainMs` (from {@link splitBrainDelayMs}; 0 when none is) whatever was proven here.
 */
export function termDelayMs(takeoverDelayMs: number, clean: boolean, splitBrainMs: number): number {
  if (splitBrainMs > 0) return splitBrainMs;
  return clean ? 0 : takeoverDelayMs;
}

const PROBE = `/* pgleaderlock:peer */ SELECT pg_is_in_recovery() AS recovery,
  CASE WHEN NOT pg_is_in_recovery()
       THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline`;

/** For servers that refuse the WAL functions (Aurora): recovery only, timeline 0 (unknown). */
const PROBE_BASIC = `/* pgleaderlock:peer */ SELECT pg_is_in_recovery() AS recovery,
  CASE WHEN NOT pg_is_in_recovery() THEN 0 END AS timeline`;

type ProbeRow = { recovery: boolean; timeline: number | null };

/** PROBE, or PROBE_BASIC where PROBE fails with an SQL error. */
async function ask(client: pg.Client): Promise<ProbeRow | null> {
  const { rows } = await client.query<ProbeRow>(PROBE).catch((err: unknown) => {
    if (sqlStateOf(err) === undefined) throw err;
    return client.query<ProbeRow>(PROBE_BASIC);
  });
  return rows[0] ?? null;
}

/** What a peer said in one probe. */
export type PeerState =
  | { readonly kind: 'primary'; readonly timeline: number }
  | { readonly kind: 'standby' }
  | { readonly kind: 'refused' }
  | { readonly kind: 'unreachable' };

/**
 * One probe round on fresh connections (closed after), each bounded by PEER_TIMEOUT_MS.
 * `signal` (a shutdown) ends it at once: every peer not answered yet is unreachable.
 */
export async function probePeers(
  peers: readonly Endpoint[],
  clock: Clock,
  signal?: AbortSignal,
): Promise<PeerState[]> {
  return Promise.all(
    peers.map(async (peer) => {
      let client: pg.Client | null = null;
      let late = false;
      let timer: unknown;
      const attempt = new AbortController(); // past the deadline or at a stop: its socket closed at once
      let giveUp = (): void => {};
      const work = (async (): Promise<PeerState> => {
        const c = await peer.connect(undefined, attempt.signal);
        c.on('error', () => {});
        if (late) {
          destroyClient(c);
          return { kind: 'unreachable' };
        }
        client = c;
        const row = await ask(c);
        if (!row) return { kind: 'unreachable' };
        return row.recovery ? { kind: 'standby' } : { kind: 'primary', timeline: row.timeline ?? 0 };
      })();
      try {
        return await Promise.race([
          work,
          new Promise<PeerState>((resolve) => {
            giveUp = () => {
              late = true;
              attempt.abort();
              resolve({ kind: 'unreachable' });
            };
            timer = clock.setTimeout(giveUp, PEER_TIMEOUT_MS);
            if (signal?.aborted) giveUp();
            signal?.addEventListener('abort', giveUp, { once: true });
          }),
        ]);
      } catch (err) {
        return { kind: isRefused(err) ? 'refused' : 'unreachable' };
      } finally {
        clock.clearTimeout(timer);
        signal?.removeEventListener('abort', giveUp);
        work.catch(() => {});
        if (client) destroyClient(client);
      }
    }),
  );
}

/** What one round learnt of a peer: a primary (not newer), not one, or nothing (no answer). */
type Word = 'primary' | 'not primary' | 'no answer';

export class PeerWatch {
  /**
   * Each peer's last word: whether it answered as a primary on the same or an older
   * timeline (an old primary still up beside this one), starting from the survey's word. A
   * round without an answer from a peer (its deadline missed under load, a connection
   * still being opened) keeps the last word: an old primary that was slow once is still
   * up. A peer that refuses connections, or answers as a standby, is no longer one.
   */
  private readonly primaries: Set<Endpoint>;
  private readonly clients = new Map<Endpoint, pg.Client>();
  /** Peers whose connection attempt (bounded by the connect timeout) outlived a round. */
  private readonly connecting = new Set<Endpoint>();
  private timer: unknown = null;
  private stopped = false;
  /** Aborted by stop(): a connection attempt still under way is abandoned. */
  private readonly stopping = new AbortController();

  constructor(
    private readonly peers: readonly Endpoint[],
    /** The leader's own server: its label and timeline. */
    private readonly own: { label: string; timeline: number },
    private readonly clock: Clock,
    private readonly onPromotion: (error: LockError) => void,
    /** Between rounds: PEER_INTERVAL_MS for a leader; a partition worker's health interval. */
    private readonly intervalMs: number = PEER_INTERVAL_MS,
    /** The peers the survey found a primary (older timelines: this one is the newest). */
    primaries: readonly Endpoint[] = [],
  ) {
    this.primaries = new Set(primaries);
  }

  /** Whether a peer's last word was that it is a primary: an old primary still up beside this one. */
  get otherPrimary(): boolean {
    return this.primaries.size > 0;
  }

  start(): void {
    this.schedule(0);
  }

  stop(): void {
    this.stopped = true;
    this.stopping.abort();
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
    for (const c of this.clients.values()) destroyClient(c);
    this.clients.clear();
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = this.clock.setTimeout(() => {
      this.timer = null;
      void this.round();
    }, ms);
  }

  private async round(): Promise<void> {
    const said = await Promise.all(this.peers.map((p) => this.probe(p)));
    if (this.stopped) return;
    this.peers.forEach((peer, i) => {
      if (said[i] === 'primary') this.primaries.add(peer);
      else if (said[i] === 'not primary') this.primaries.delete(peer);
    });
    this.schedule(this.intervalMs);
  }

  /** One peer's word this round. */
  private async probe(peer: Endpoint): Promise<Word> {
    if (this.connecting.has(peer)) return 'no answer'; // still connecting since an earlier round
    try {
      const row = await this.bounded(async () => {
        let client = this.clients.get(peer);
        if (!client) {
          this.connecting.add(peer);
          try {
            client = await peer.connect(undefined, this.stopping.signal);
          } finally {
            this.connecting.delete(peer);
          }
          client.on('error', () => {});
          if (this.stopped) {
            destroyClient(client);
            return null;
          }
          this.clients.set(peer, client);
        }
        return ask(client);
      });
      if (this.stopped || !row) return 'no answer';
      if (row.recovery) return 'not primary';
      if (row.timeline === null) return 'no answer';
      if (row.timeline > this.own.timeline) {
        this.stopped = true;
        this.onPromotion(
          new LockError(
            `${peer.label} is a primary on timeline ${row.timeline}, newer than this session's server ` +
              `${this.own.label} (timeline ${this.own.timeline}): a standby was promoted while the old primary is still up; every term on it ends`,
            { code: 'ERR_PGLEADERLOCK_UNSAFE' },
          ),
        );
        return 'no answer';
      }
      return 'primary';
    } catch (err) {
      // an unreachable peer proves nothing (a refused connection: no server listens there);
      // reconnect next round
      const client = this.clients.get(peer);
      if (client) destroyClient(client);
      this.clients.delete(peer);
      return isRefused(err) ? 'not primary' : 'no answer';
    }
  }

  /** `work` within PEER_TIMEOUT_MS; `stop()` ends the wait (and its timer) at once. */
  private async bounded<T>(work: () => Promise<T>): Promise<T> {
    let timer: unknown;
    let onStop: (() => void) | null = null;
    const signal = this.stopping.signal;
    try {
      return await Promise.race([
        work(),
        new Promise<never>((_, reject) => {
          timer = this.clock.setTimeout(() => reject(new Error('no answer')), PEER_TIMEOUT_MS);
          onStop = () => reject(new Error('stopped'));
          if (signal.aborted) onStop();
          else signal.addEventListener('abort', onStop, { once: true });
        }),
      ]);
    } finally {
      this.clock.clearTimeout(timer);
      if (onStop) signal.removeEventListener('abort', onStop);
    }
  }
}

/**
 * Opening a worker's sessions: the member session (member-session.ts), the ring watch on a
 * second connection to the same server (watch.ts), and, with several hosts, the peer watch
 * (core/peers.ts); and wiring what they report into the worker: a death seen by the watch
 * is announced to everyone, the member session's own death ends every term at once, and
 * each notice wakes the loop.
 */

import type { PeerWatch } from '../core/peers.js';
import type { PgpoolFront } from '../core/pgpool.js';
import { MemberSession } from './member-session.js';
import type { ResolvedPartitionOptions } from './options.js';
import type { Ownership } from './ownership.js';
import { type keysOf, memberAppName, slotOf } from './sql.js';
import type { Terms } from './terms.js';
import { RingWatch } from './watch.js';

/** A worker's connections while it is a member. */
export interface Sessions {
  readonly member: MemberSession;
  readonly watch: RingWatch;
  readonly peers: PeerWatch | null;
}

export interface SessionHooks {
  /** The member session's connect deadline (core/retry.ts `RetryCycle.connectTimeoutMs`). */
  connectTimeoutMs: number;
  ownership: Ownership;
  terms: Terms;
  /** Wake the worker's loop (a notice, a death). */
  wake(): void;
  report(error: Error): void;
  /** `shutdown()` was called: a session's end is then no loss to log. */
  stopping(): boolean;
  /** Aborted by `shutdown()`: a connection under way is abandoned at once. */
  readonly signal: AbortSignal;
  countStatement(): void;
  /** The sessions are open (before the `joined` notice is sent). */
  opened(sessions: Sessions): void;
  /** The member session ended, with these partitions' terms open. */
  lost(member: LostMember): void;
  /** The proof-of-drain notices to send first on the server at `host` (member-session.ts). */
  drained(host: string): readonly string[];
  /** A pgpool-II front was recognised (pgpool.ts). */
  pgpool(front: PgpoolFront): void;
}

/** A member session that ended: who it was, where, and the partitions whose terms it had open. */
export interface LostMember {
  readonly token: string;
  readonly pid: number;
  readonly host: string;
  readonly partitions: readonly number[];
}

export async function openSessions(
  o: ResolvedPartitionOptions,
  keys: ReturnType<typeof keysOf>,
  h: SessionHooks,
): Promise<Sessions> {
  const member = await MemberSession.open({
    endpoints: o.endpoints,
    membersKey: keys.members,
    slot: slotOf(o.id),
    channel: keys.channel,
    appName: memberAppName(o.id, o.partitions),
    clock: o.clock,
    serverReleaseMs: o.serverReleaseMs,
    healthIntervalMs: o.healthIntervalMs,
    queryTimeoutMs: o.queryTimeoutMs,
    connectTimeoutMs: h.connectTimeoutMs,
    closeTimeoutMs: o.closeTimeoutMs,
    unref: o.unref,
    fencingTable: o.fencingTable,
    onStatement: h.countStatement,
    drained: h.drained,
    stopping: h.stopping,
    signal: h.signal,
    onPgpool: h.pgpool,
    random: o.random,
  });
  const watchName = `pgleaderlock:${o.id}#watch`;
  const watch = new RingWatch({
    // the watch session goes to the same server as the member session, opened under its
    // own name: no backend shows the member's name but the member session
    connect: (signal) => member.endpoint.connect(watchName, signal),
    appName: watchName,
    membersKey: keys.members,
    sliceMs: o.watchSliceMs,
    clock: o.clock,
    queryTimeoutMs: o.queryTimeoutMs,
    closeTimeoutMs: o.closeTimeoutMs,
    unref: o.unref,
    serverReleaseMs: o.serverReleaseMs,
    onDeath: (slot) => {
      const gone = h.ownership.members.find((m) => m.slot === slot);
      if (gone && h.ownership.handovers.died(gone.id))
        h.terms.log('warn', 'member_died', { member: gone.id });
      // sent after whatever statement runs now (one statement at a time on a connection)
      void member.notify(`died:${gone?.id ?? slot}`).catch(() => {});
      h.wake();
    },
    onError: h.report,
    onStatement: h.countStatement,
    random: o.random,
    // the worker's reconnect policy; a strategy that gives up on the watch ends the member
    // session too, as it does after the member's own failures: the worker's own cycle then
    // reconnects (with a new watch) or gives up
    retryStrategy: o.retryStrategy,
    onGiveUp: (error) => {
      h.report(error);
      member.destroy();
    },
  });
  const peers = member.watchPeers(o.healthIntervalMs);
  h.opened({ member, watch, peers });
  member.onDeath((err) => {
    if (!h.stopping()) h.terms.log('warn', 'session_lost', { err });
    const { token, pid } = member;
    h.lost({ token, pid, host: member.endpoint.label, partitions: h.terms.openPartitions() });
    void h.terms.revokeAll('lost'); // at once, before the loop runs
    h.wake();
  });
  h.ownership.handovers.reset(); // what earlier sessions heard is no proof for this one
  member.onNotify((payload) => {
    h.ownership.handovers.hear(payload);
    h.wake();
  });
  try {
    await member.notify(`joined:${o.id}`);
  } catch (err) {
    member.destroy();
    await watch.close();
    throw err;
  }
  peers?.start();
  return { member, watch, peers };
}

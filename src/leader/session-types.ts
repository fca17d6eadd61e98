/** What a lock session (session.ts) takes and gives: its options, where it runs, a grant, an epoch, a check. */

import type { Directive } from '../core/handover.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import type { Surveyed } from '../core/primary.js';
import type { Safety } from '../core/safety.js';

/** What a session needs of the lock's options (see LeaderLockOptions for each). */
export type SessionOptions = Pick<
  ResolvedOptions,
  | 'key1'
  | 'key2'
  | 'id'
  | 'applicationName'
  | 'clock'
  | 'serverReleaseMs'
  | 'healthIntervalMs'
  | 'waitSliceMs'
  | 'queryTimeoutMs'
  | 'closeTimeoutMs'
  | 'unref'
  | 'priority'
  | 'random'
>;

/** Where a session runs: its host, that server's timeline, and the other configured hosts. */
export interface SessionPlace {
  readonly host: string;
  readonly timeline: number;
  readonly others: readonly Surveyed[];
}

/** A granted acquisition, with the figures its lease is computed from. */
export interface Acquired {
  readonly safety: Safety;
  /**
   * A clock time no later than the grant: the statement's send time plus how long the
   * server saw it wait. The server's activity on the session (and so its release bound)
   * starts no earlier than this; the lease counts from it.
   */
  readonly provenAt: number;
  /** The previous holder is proven to have released cleanly (handover.ts). */
  readonly cleanHandover: boolean;
  /** That release handed over to a named successor (succession.ts): who may take the lock, until when. */
  readonly directive: Directive | null;
  /** The server's clock at the grant, epoch milliseconds (a directive's `until` is on it). */
  readonly serverMs: number;
}

/** A fencing epoch, and whether the previous epoch's holder released it cleanly (null: unknown). */
export interface Epoch {
  readonly epoch: bigint;
  readonly previousReleased: boolean | null;
}

/** Result of an ownership check. */
export type CheckResult = { ok: true; safety: Safety } | { ok: false; reason: string };

/** The row an acquisition (sql.ts TRY_LOCK, WAIT_LOCK, LATE_GRANT) returns. */
export interface AcquireRow {
  pid: number;
  same: boolean;
  held_before: boolean;
  ok: boolean;
  /** The key taken a second time with the grant (sql.ts ON_GRANT); null without a grant. */
  twice: boolean | null;
  idle: string | null;
  waited_ms: number | null;
  server_ms: number | null;
}

/** The row an ownership check (sql.ts CHECK) returns. */
export interface CheckRow {
  pid: number;
  same: boolean;
  held: boolean;
  recovery: boolean;
}

/** The row of sql.ts `CURRENT_HOLDER`: the backend holding the key, its application_name and last statement. */
export interface HolderRow {
  pid: number;
  application_name: string | null;
  query: string | null;
}

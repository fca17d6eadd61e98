/**
 * One simulated backend (a server process serving one connection): its pid, session
 * settings, application_name, marker, the channels it listens on, the advisory keys it
 * holds, the statement it runs, and what it knows of its socket. Also the wire types a
 * backend answers with, and why a backend stops holding a key.
 */
import type { Packet } from '../net.js';

/** The other end of a backend's socket: a client's link, or a pooler's server connection (pooler.ts). */
export interface Peer {
  /** 'blackhole': what the backend sends is lost (and its client hears nothing). */
  readonly state: 'open' | 'blackhole' | 'closed';
  toClient(packet: Packet): void;
  /** The backend exited. */
  serverGone(): void;
}

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
  | 'user-timeout'
  /** pg_advisory_unlock_all run on the holder's backend behind its client's back (a directed fault). */
  | 'unlock-all';

/** The lock is gone at once, before the holder can know (docs/safety.md, "the lock gone at once"). */
export const INSTANT: ReadonlySet<ReleaseCause> = new Set(['crash', 'terminate', 'restart', 'reset']);

/** The settings a session may set (each starts at 0: off). */
const SETTINGS = [
  'idle_session_timeout',
  'tcp_keepalives_idle',
  'tcp_keepalives_interval',
  'tcp_keepalives_count',
  'tcp_user_timeout',
  'client_connection_check_interval',
  'lock_timeout',
];

export interface Waiting {
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
  /** When the session started (pg_stat_activity.backend_start). */
  startedAt = 0;
  /** Blackhole: when the first byte it sent went unacknowledged. */
  firstUnacked: number | null = null;

  constructor(
    readonly pid: number,
    /** Who it serves (a pooled backend: the pooler, or the client it is pinned to in session mode). */
    public owner: string,
    readonly link: Peer,
  ) {}
}

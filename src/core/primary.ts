/**
 * Finding the primary among the configured hosts (libpq's multi-host conventions,
 * hosts.ts). Every connection attempt surveys all hosts at once, each bounded by
 * `queryTimeoutMs`: which answer, which is a primary and on which timeline, which is a
 * standby. The lock lands only on a primary, the one on the newest timeline (a promoted
 * standby beats an old primary that is still up), the first listed among equals. DNS is
 * resolved again on every attempt (pg resolves each host when it connects).
 *
 * When no host is a primary but some answered as standbys (a failover in progress), the
 * survey keeps those standby connections open for the follower (standby-watch.ts). The
 * endpoints themselves are endpoints.ts'.
 */
import type pg from 'pg';
import type { Clock } from './clock.js';
import { abandonedAfterAccept, destroyClient } from './connect.js';
import { isClient } from './connection.js';
import type { Endpoint } from './endpoints.js';
import { ConnectionError, describe, isRefused, LockError, sqlStateOf } from './errors.js';
import { withEndpointAdvice } from './providers.js';
import { StandbyWatch } from './standby-watch.js';
import { show } from './validate.js';

/**
 * Once one host answered as a primary, how long the others still get: a host that hangs
 * (a machine gone, packets dropped) must not cost every attempt `queryTimeoutMs`. A newer
 * primary among the late ones is still caught: settle() probes the others after a grant,
 * and a leader watches them (peers.ts).
 */
export const SURVEY_GRACE_MS = 250;

const SURVEY = `/* pgleaderlock:survey */ SELECT pg_is_in_recovery() AS recovery,
  (SELECT system_identifier::text FROM pg_control_system()) AS system_id,
  CASE WHEN NOT pg_is_in_recovery()
       THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline`;

/**
 * For servers that refuse the WAL and control functions (Amazon Aurora does, and a role
 * may be denied them): recovery only. The timeline reads as 0, unknown: no timeline
 * comparison is made then (no epoch floor, no promotion guard), and no identifier check.
 */
const SURVEY_BASIC = `/* pgleaderlock:survey */ SELECT pg_is_in_recovery() AS recovery, NULL::text AS system_id,
  CASE WHEN NOT pg_is_in_recovery() THEN 0 END AS timeline`;

/** What a standby is asked every PRIMARY_POLL_MS while no host is a primary. */

/**
 * What a host said: a primary (its timeline, 0 if unknown), a standby, nothing listening,
 * or an error (no answer in time, authentication, …).
 */
export type HostState =
  | { readonly kind: 'primary'; readonly timeline: number; readonly systemId: string | null }
  | { readonly kind: 'standby'; readonly systemId: string | null }
  | { readonly kind: 'refused'; readonly error: Error }
  | { readonly kind: 'unreachable'; readonly error: Error };

export interface Surveyed {
  readonly endpoint: Endpoint;
  readonly state: HostState;
}

/** The primary chosen, its connected client, and what every other host said. */
export interface Found {
  readonly endpoint: Endpoint;
  readonly client: pg.Client;
  readonly timeline: number;
  /** The other hosts (the peers a leader watches for a promotion). */
  readonly others: readonly Surveyed[];
}

/**
 * A `connect` for the primary found: the client the survey connected first (a session
 * takes it over), then new connections to that host.
 */
export function connectFound(found: Found): () => Promise<pg.Client> {
  let first: pg.Client | null = found.client;
  return async () => {
    const c = first ?? (await found.endpoint.connect());
    first = null;
    return c;
  };
}

/**
 * Set a session up on the primary found. `signal` (a shutdown) closes the found connection
 * if it aborts meanwhile: the set-up's statements then fail at once instead of running on.
 * A refusal (`ERR_PGLEADERLOCK_UNSAFE`) on a known pooled endpoint names the endpoint to use
 * (providers.ts), for LeaderLock and PartitionedLeadership alike.
 */
export async function settingUp<T>(
  found: Found,
  signal: AbortSignal | undefined,
  setUp: (found: Found) => Promise<T>,
): Promise<T> {
  const abandon = (): void => destroyClient(found.client);
  signal?.addEventListener('abort', abandon, { once: true });
  if (signal?.aborted) abandon();
  try {
    return await setUp(found);
  } catch (err) {
    throw withEndpointAdvice(err, found.endpoint.target); // a known pooled endpoint: which to use
  } finally {
    signal?.removeEventListener('abort', abandon);
  }
}

/**
 * No host is a primary, but standbys answered: a failover in progress (or a standby-only
 * list). Code `ERR_PGLEADERLOCK_NO_PRIMARY`; passed to `onError` once, and the lock waits
 * for a promotion.
 */
export class NoPrimaryError extends LockError {
  override name = 'NoPrimaryError';
  /**
   * The connections the survey left open to the standbys (the lock's own business): not
   * enumerable, so a logger's serializer never walks into the clients.
   * @internal
   */
  declare readonly standbys: StandbyWatch;
  /** @internal The lock makes it; users only receive it. */
  constructor(message: string, standbys: StandbyWatch) {
    super(message, { code: 'ERR_PGLEADERLOCK_NO_PRIMARY' });
    Object.defineProperty(this, 'standbys', { value: standbys, enumerable: false });
  }
}

interface Options {
  clock: Clock;
  queryTimeoutMs: number;
  /**
   * The deadline of each host's connect and survey (default `queryTimeoutMs`): longer after
   * connects that missed it (core/retry.ts `RetryCycle.connectTimeoutMs`).
   */
  connectTimeoutMs?: number | undefined;
  /** Abandons the survey (a shutdown): every attempt fails at once, its socket closed. */
  signal?: AbortSignal | undefined;
}

/**
 * `findPrimary` for a caller that does not watch standbys for a promotion: when no host is a
 * primary, the survey's standby connections are closed before the error is thrown (left
 * open, each attempt would keep one more per standby).
 */
export async function findPrimaryOnly(endpoints: readonly Endpoint[], o: Options): Promise<Found> {
  try {
    return await findPrimary(endpoints, o);
  } catch (err) {
    if (err instanceof NoPrimaryError) err.standbys.close();
    throw err;
  }
}

/** Survey every endpoint and connect to the primary on the newest timeline. */
export async function findPrimary(endpoints: readonly Endpoint[], o: Options): Promise<Found> {
  let cut = (): void => {};
  const cutting = new Promise<void>((resolve) => {
    cut = resolve;
  });
  let grace: unknown = null;
  const results = await Promise.all(
    endpoints.map(async (e) => {
      const r = await surveyOne(e, o, cutting);
      if (r.state.kind === 'primary' && grace === null && endpoints.length > 1) {
        grace = o.clock.setTimeout(cut, SURVEY_GRACE_MS);
      }
      return r;
    }),
  );
  if (grace !== null) o.clock.clearTimeout(grace);
  const ids = new Map<string, string>();
  for (const r of results) {
    if ((r.state.kind === 'primary' || r.state.kind === 'standby') && r.state.systemId !== null) {
      ids.set(r.state.systemId, r.endpoint.label);
    }
  }
  if (ids.size > 1) {
    for (const r of results) if (r.client) destroyClient(r.client);
    const [a, b] = [...ids.entries()];
    throw new LockError(
      `the configured hosts are different PostgreSQL clusters: ${a?.[1]} has system identifier ${a?.[0]}, ${b?.[1]} has ${b?.[0]}; list the hosts of one cluster`,
      { code: 'ERR_PGLEADERLOCK_UNSAFE' },
    );
  }
  let best: (typeof results)[number] | null = null;
  for (const r of results) {
    if (r.state.kind !== 'primary') continue;
    if (!best || r.state.timeline > (best.state as { timeline: number }).timeline) best = r;
  }
  const standbyClients = results.filter((r) => r.state.kind === 'standby' && r.client);
  for (const r of results) {
    if (r.client && r !== best && !standbyClients.includes(r)) destroyClient(r.client);
  }
  const summary = results.map((r) => `${r.endpoint.label}: ${stateText(r.state)}`).join('; ');
  if (best?.client && best.state.kind === 'primary') {
    for (const r of standbyClients) if (r.client) destroyClient(r.client);
    const chosen = best;
    return {
      endpoint: chosen.endpoint,
      client: best.client,
      timeline: best.state.timeline,
      others: results.filter((r) => r !== chosen).map(({ endpoint, state }) => ({ endpoint, state })),
    };
  }
  if (standbyClients.length > 0) {
    const watch = new StandbyWatch(
      standbyClients.map((r) => ({ label: r.endpoint.label, client: r.client as pg.Client })),
      o,
    );
    throw new NoPrimaryError(`no primary among the configured hosts (${summary})`, watch);
  }
  const first = results[0];
  const cause = first && 'error' in first.state ? first.state.error : undefined;
  if (results.length === 1 && first && cause) {
    const where = first.endpoint.label === 'connect()' ? '' : ` to ${first.endpoint.label}`;
    throw new ConnectionError(`could not connect${where}: ${describe(cause)}`, { cause });
  }
  throw new ConnectionError(`could not connect to any configured host (${summary})`, { cause });
}

function stateText(s: HostState): string {
  if (s.kind === 'primary') return s.timeline > 0 ? `primary, timeline ${s.timeline}` : 'primary';
  if (s.kind === 'standby') return 'standby (in recovery)';
  return `${s.kind === 'refused' ? 'connection refused: ' : ''}${describe(s.error)}`;
}

async function surveyOne(
  endpoint: Endpoint,
  o: Options,
  cut: Promise<void>,
): Promise<{ endpoint: Endpoint; state: HostState; client: pg.Client | null }> {
  let client: pg.Client | null = null;
  let late = false;
  let timer: unknown;
  let abandon = (): void => {};
  // a deadline missed, a cut or a shutdown abandons the attempt: its socket is closed at
  // once, not left connecting until pg's own connect timeout
  const attempt = new AbortController();
  const limitMs = o.connectTimeoutMs ?? o.queryTimeoutMs;
  const deadline = new Promise<never>((_, reject) => {
    const fail = (why: string, timedOut = false): void => {
      late = true;
      if (!client) attempt.abort(); // still connecting (a connected client is destroyed below)
      // the server had accepted the TCP connection: busy, not silent (core/retry.ts)
      const accepted = client !== null || abandonedAfterAccept(attempt.signal);
      const what = client
        ? 'the survey got no answer'
        : accepted
          ? 'the server accepted the connection but did not complete it'
          : 'connecting did not complete';
      const code = timedOut ? 'ERR_PGLEADERLOCK_CONNECT_TIMEOUT' : 'ERR_PGLEADERLOCK_CONNECTION';
      reject(new ConnectionError(`${what} ${why}`, { code, accepted: timedOut && accepted }));
    };
    timer = o.clock.setTimeout(() => fail(`within ${limitMs} ms`, true), limitMs);
    void cut.then(() => fail(`within ${SURVEY_GRACE_MS} ms of another host answering as the primary`));
    abandon = () => fail('(abandoned: shutting down)');
    if (o.signal?.aborted) abandon();
    o.signal?.addEventListener('abort', abandon, { once: true });
  });
  const work = (async () => {
    const c: unknown = await endpoint.connect(undefined, attempt.signal, limitMs);
    if (!isClient(c))
      throw new ConnectionError(`connect must resolve to a connected pg.Client, received ${show(c)}`);
    if (late) {
      destroyClient(c);
      throw new ConnectionError('connected after the deadline');
    }
    client = c;
    type Row = { recovery: boolean; system_id: string | null; timeline: number | null };
    const { rows } = await c.query<Row>(SURVEY).catch((err: unknown) => {
      // a server that refuses the WAL or control functions (Aurora): recovery only
      if (sqlStateOf(err) === undefined || late) throw err;
      return c.query<Row>(SURVEY_BASIC);
    });
    const row = rows[0];
    if (!row) throw new ConnectionError('the survey returned no row');
    return row;
  })();
  try {
    const row = await Promise.race([work, deadline]);
    const state: HostState = row.recovery
      ? { kind: 'standby', systemId: row.system_id }
      : { kind: 'primary', timeline: row.timeline ?? 0, systemId: row.system_id };
    return { endpoint, state, client };
  } catch (err) {
    work.catch(() => {});
    if (client) destroyClient(client);
    const error = err instanceof Error ? err : new Error(describe(err));
    return { endpoint, state: { kind: isRefused(err) ? 'refused' : 'unreachable', error }, client: null };
  } finally {
    o.clock.clearTimeout(timer);
    o.signal?.removeEventListener('abort', abandon);
  }
}

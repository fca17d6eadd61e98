/**
 * A worker's ownership session: one connection to the primary that holds the worker's
 * member lock and its partitions' locks, listens for membership news, and bounds every
 * statement by `queryTimeoutMs`. The server releases everything it holds the moment it
 * ends; the same session settings as a leader's (`idle_session_timeout`, keepalives,
 * `tcp_user_timeout`) bound how long a frozen worker keeps them (docs/safety.md), and the
 * lease behind `owned` comes from what the server applied.
 */
import type pg from 'pg';
import { systemClock } from '../clock.js';
import { destroyClient, parseSettingMs } from '../connect.js';
import { ConnectionError, LockError, sqlStateOf } from '../errors.js';
import { createTableSql } from '../fencing.js';
import { PeerWatch } from '../peers.js';
import { type Endpoint, findPrimary, type Surveyed } from '../primary.js';
import { type AppliedSettings, connectSettings, READ_BACK, type Safety, safetyFor } from '../safety.js';
import { READ_SETTINGS } from '../sql.js';

export interface OwnerOptions {
  endpoints: readonly Endpoint[];
  membersKey: number;
  slot: number;
  channel: string;
  /** application_name: how other workers read this one's id and partition count. */
  appName: string;
  serverReleaseMs: number;
  healthIntervalMs: number;
  queryTimeoutMs: number;
  /** With fencing: the epoch table, created at connect if missing. */
  fencingTable: string | null;
  onStatement: () => void;
}

export class Owner {
  private deathHandlers: ((err: Error) => void)[] = [];
  private died: Error | null = null;

  private constructor(
    private readonly client: pg.Client,
    private readonly o: OwnerOptions,
    /** The primary this session is on; the watch session connects there too. */
    readonly endpoint: Endpoint,
    /** Settings for the watch session (keepalives and friends, without idle_session_timeout). */
    readonly watchSettings: [string, string][],
    /** The server's timeline (0: unknown): the floor of fencing epochs, and what peers are compared with. */
    readonly timeline: number,
    /** What the other configured hosts said when this session connected (the peers to watch). */
    readonly others: readonly Surveyed[],
  ) {
    const die = (err: Error): void => {
      if (this.died) return;
      this.died = err;
      for (const h of this.deathHandlers) h(err);
    };
    client.removeAllListeners('error');
    client.on('error', (err) =>
      die(new ConnectionError(`ownership session failed: ${err.message}`, { cause: err })),
    );
    client.on('end', () => die(new ConnectionError('ownership session closed')));
  }

  safety!: Safety;
  pid = 0;

  /** Connect to the primary, apply and read back the settings, listen, take the member lock. */
  static async open(o: OwnerOptions): Promise<Owner> {
    const found = await findPrimary(o.endpoints, { clock: systemClock, queryTimeoutMs: o.queryTimeoutMs });
    const client = found.client;
    try {
      const [info] = (
        await client.query<{ v: string; pid: number }>(
          "SELECT current_setting('server_version_num') AS v, pg_backend_pid() AS pid",
        )
      ).rows;
      const version = Number(info?.v ?? 0);
      const common = connectSettings(o.serverReleaseMs, version);
      const wanted: [string, string][] = [...common, ['application_name', o.appName]];
      if (version >= 140000) wanted.push(['idle_session_timeout', String(Math.ceil(o.serverReleaseMs))]);
      const calls = wanted.map((_, i) => `set_config($${2 * i + 1}, $${2 * i + 2}, false)`).join(', ');
      await client.query(`/* pgleaderlock:configure */ SELECT ${calls}`, wanted.flat());
      const rows = (await client.query<{ name: string; setting: string }>(READ_SETTINGS, [[...READ_BACK]]))
        .rows;
      const read = (name: string): number | null => {
        const row = rows.find((r) => r.name === name);
        return row ? Number(row.setting) : null;
      };
      const settings: AppliedSettings = {
        serverVersion: version,
        idleSessionTimeoutMs: parseSettingMs(String(read('idle_session_timeout') ?? '')) ?? null,
        tcpKeepalivesIdleS: read('tcp_keepalives_idle') ?? 0,
        tcpKeepalivesIntervalS: read('tcp_keepalives_interval') ?? 0,
        tcpKeepalivesCount: read('tcp_keepalives_count') ?? 0,
        tcpUserTimeoutMs: read('tcp_user_timeout'),
        clientConnectionCheckIntervalMs: read('client_connection_check_interval'),
      };
      const safety = safetyFor(settings, o.healthIntervalMs, o.queryTimeoutMs);
      if (o.fencingTable !== null) await createFencingTable(client, o.fencingTable, o.queryTimeoutMs);
      await client.query(`/* pgleaderlock:listen */ LISTEN ${o.channel}`);
      const [member] = (
        await client.query<{ got: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS got', [
          o.membersKey,
          o.slot,
        ])
      ).rows;
      if (!member?.got) {
        throw new LockError(
          `member slot ${o.slot} is taken: a worker with this id is already running (or its session has not ended yet)`,
        );
      }
      const owner = new Owner(client, o, found.endpoint, common, found.timeline, found.others);
      owner.safety = safety;
      owner.pid = info?.pid ?? 0;
      return owner;
    } catch (err) {
      destroyClient(client);
      throw err;
    }
  }

  /**
   * Several hosts: a watch of the others for a promotion beside this (old) primary
   * (peers.ts), every `intervalMs`. A promotion closes this session: every term ends at
   * once; the worker's loop reports the error, and its next session finds the new primary.
   * Null with one host, or when this server hides its timeline.
   */
  watchPeers(intervalMs: number): PeerWatch | null {
    if (this.others.length === 0 || this.timeline === 0) return null;
    return new PeerWatch(
      this.others.map((o) => o.endpoint),
      { label: this.endpoint.label, timeline: this.timeline },
      systemClock,
      (error) => this.destroy(error),
      intervalMs,
      this.others.some((o) => o.state.kind === 'primary'),
    );
  }

  get dead(): Error | null {
    return this.died;
  }

  onDeath(fn: (err: Error) => void): void {
    this.deathHandlers.push(fn);
  }

  onNotify(fn: (payload: string) => void): void {
    this.client.on('notification', (n) => {
      if (n.channel === this.o.channel) fn(n.payload ?? '');
    });
  }

  /** One statement, bounded by queryTimeoutMs: past it the session is destroyed (a death). */
  async query<R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> {
    return (await this.bounded(() => this.client.query<R>(text, values))).rows;
  }

  /** Several statements in one round trip (no parameters, no rows), bounded as `query`. */
  async script(text: string): Promise<void> {
    await this.bounded(() => this.client.query(text));
  }

  private async bounded<T>(send: () => Promise<T>): Promise<T> {
    if (this.died) throw this.died;
    this.o.onStatement();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const err = new ConnectionError(
          `a statement took longer than queryTimeoutMs (${this.o.queryTimeoutMs} ms)`,
          {
            code: 'ERR_PGLEADERLOCK_QUERY_TIMEOUT',
          },
        );
        this.destroy(err);
        reject(err);
      }, this.o.queryTimeoutMs);
    });
    try {
      return await Promise.race([send(), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  notify(payload: string): Promise<unknown> {
    return this.query('SELECT pg_notify($1, $2)', [this.o.channel, payload]);
  }

  destroy(err: Error = new ConnectionError('ownership session closed')): void {
    if (!this.died) {
      this.died = err;
      for (const h of this.deathHandlers) h(err);
    }
    destroyClient(this.client);
  }

  /** A clean end: the server frees whatever is still held. */
  async end(): Promise<void> {
    this.died ??= new ConnectionError('ownership session ended');
    await Promise.race([this.client.end().catch(() => {}), new Promise((r) => setTimeout(r, 1000).unref())]);
    destroyClient(this.client);
  }
}

/**
 * Create the epoch table if missing, within `timeoutMs`: on a table of an older version the
 * column added waits for open fenced writes, and new fenced writes would queue behind it.
 */
async function createFencingTable(client: pg.Client, table: string, timeoutMs: number): Promise<void> {
  const ms = `'${Math.ceil(timeoutMs)}ms'`;
  try {
    await client.query(
      `BEGIN; SET LOCAL lock_timeout = ${ms}; SET LOCAL statement_timeout = ${ms}; ${createTableSql(table)}; COMMIT`,
    );
  } catch (err) {
    // two sessions creating it at once: one wins, the other sees a duplicate
    if (!['42P07', '23505'].includes(sqlStateOf(err) ?? '')) throw err;
  }
}

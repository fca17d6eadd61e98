/**
 * Recognising a pgpool-II front, and what in its configuration matters for a lock
 * (docs/safety.md, "Proxies and poolers beyond PgBouncer").
 *
 * pgpool answers `SHOW pool_version` itself; PostgreSQL (and a pooler that forwards the
 * statement) refuses it with SQLSTATE 42704. `SHOW pool_status` lists pgpool's settings.
 * In streaming-replication mode pgpool gives each client connection backends of its own
 * for the connection's life and sends every statement that writes, locks or reads a
 * system view to the primary: a session advisory lock works through it. What breaks a lock
 * service is elsewhere:
 *  - `failover_on_backend_shutdown = on` (the binary's built-in default): a
 *    `pg_terminate_backend` of any backend reached through pgpool makes pgpool detach that
 *    node, the healthy primary included, and every client of the pool fails until an
 *    operator attaches it again (or, with a `failover_command`, the database fails over);
 *  - `failover_on_backend_error = on`: a network error on a backend connection detaches
 *    the node the same way.
 */
import { sqlStateOf } from './errors.js';

/** The pgpool settings that matter for a lock, as pgpool spells them. */
export const PGPOOL_SETTINGS = [
  'backend_clustering_mode',
  'failover_on_backend_shutdown',
  'failover_on_backend_error',
  'allow_sql_comments',
  'load_balance_mode',
] as const;
export type PgpoolSetting = (typeof PGPOOL_SETTINGS)[number];

/** A pgpool-II in the path. */
export interface PgpoolFront {
  /** `SHOW pool_version`, e.g. `4.3.5 (tamahomeboshi)`. */
  readonly version: string;
  /** Each setting's value as `SHOW pool_status` reports it (`on`/`off`, a mode name); null if not listed. */
  readonly settings: Readonly<Record<PgpoolSetting, string | null>>;
}

/** Runs one statement in the simple query protocol (pgpool answers its SHOW commands only there). */
export type SimpleQuery = (sql: string) => Promise<readonly Record<string, unknown>[]>;

/**
 * The pgpool-II in the path, or null when the statement reached PostgreSQL (SQLSTATE 42704:
 * no such setting). Any other failure is thrown.
 */
export async function detectPgpool(query: SimpleQuery): Promise<PgpoolFront | null> {
  let rows: readonly Record<string, unknown>[];
  try {
    rows = await query('SHOW pool_version');
  } catch (err) {
    if (sqlStateOf(err) === '42704') return null;
    throw err;
  }
  const first = rows[0] ?? {};
  const version = String(first.pool_version ?? Object.values(first)[0] ?? 'unknown');
  const status = await query('SHOW pool_status');
  const settings = Object.fromEntries(PGPOOL_SETTINGS.map((s) => [s, null])) as Record<
    PgpoolSetting,
    string | null
  >;
  for (const row of status) {
    const item = String(row.item ?? '');
    if ((PGPOOL_SETTINGS as readonly string[]).includes(item)) {
      settings[item as PgpoolSetting] = String(row.value ?? '').trim();
    }
  }
  return { version, settings };
}

const isOn = (v: string | null): boolean => v !== null && /^(on|true|1|yes)$/i.test(v);

/** One setting of a pgpool front that puts a lock service (or the whole pool) at risk. */
export interface PgpoolRisk {
  readonly setting: PgpoolSetting;
  /** Breaks the pool for everyone (`fail`), or makes an ordinary fault worse (`warn`). */
  readonly severity: 'fail' | 'warn';
  readonly why: string;
  readonly fix: string;
}

/** What in `front`'s settings puts a lock at risk, worst first. */
export function pgpoolRisks(front: PgpoolFront): PgpoolRisk[] {
  const risks: PgpoolRisk[] = [];
  const s = front.settings;
  if (isOn(s.failover_on_backend_shutdown)) {
    risks.push({
      setting: 'failover_on_backend_shutdown',
      severity: 'fail',
      why:
        'failover_on_backend_shutdown = on: a pg_terminate_backend of a lock session reached through pgpool ' +
        '(pgleaderlock break, an administrator) makes pgpool detach the healthy primary; every client of the pool ' +
        'then fails, and with a failover_command the database fails over',
      fix: 'set failover_on_backend_shutdown = off in pgpool.conf and reload (pgpool still fails over on its health checks)',
    });
  }
  if (isOn(s.failover_on_backend_error)) {
    risks.push({
      setting: 'failover_on_backend_error',
      severity: 'warn',
      why:
        'failover_on_backend_error = on: a network error on one backend connection (a server that closes a dead ' +
        "client's session, a cut link) makes pgpool detach that node for every client",
      fix: 'set failover_on_backend_error = off and rely on health_check_period for failover',
    });
  }
  return risks;
}

/**
 * The `pgpool` log event a lock or worker writes once when it first meets a pgpool-II
 * front: `warn` with the risky settings and their fixes, else `info`.
 */
export function pgpoolEvent(front: PgpoolFront): { level: 'info' | 'warn'; fields: Record<string, unknown> } {
  const risks = pgpoolRisks(front);
  return {
    level: risks.length ? 'warn' : 'info',
    fields: {
      version: front.version,
      settings: front.settings,
      risks: risks.map((r) => r.why),
      fixes: risks.map((r) => r.fix),
    },
  };
}

/**
 * The doctor's pgpool-II checks (core/pgpool.ts): reported only when `SHOW pool_version`
 * answers through the path. One line for the front itself, one per setting that matters.
 */
import { type PgpoolFront, pgpoolRisks } from '../core/pgpool.js';
import type { Check } from './doctor-check.js';

const on = (v: string | null): boolean => v !== null && /^(on|true|1|yes)$/i.test(v);
const show = (v: string | null): string => (v === null ? 'not reported' : on(v) ? 'on' : 'off');

/** Streaming replication is pgpool's clustering mode 1 (`SHOW pool_status` reports the number). */
function clustering(v: string | null): string {
  if (v === null) return 'clustering mode not reported';
  const names: Record<string, string> = {
    '0': 'native replication',
    '1': 'streaming replication',
    '2': 'logical replication',
    '3': 'slony',
    '4': 'raw',
    '5': 'snapshot isolation',
  };
  return `${names[v] ?? v} mode`;
}

export function pgpoolChecks(front: PgpoolFront): Check[] {
  const s = front.settings;
  const checks: Check[] = [
    {
      id: 'pgpool',
      verdict: 'ok',
      reason: `pgpool-II ${front.version} in ${clustering(s.backend_clustering_mode)}, load_balance_mode ${show(s.load_balance_mode)}: each client connection keeps backends of its own, and the lock's statements (which lock, write or read system views) go to the primary`,
    },
  ];
  const risks = new Map(pgpoolRisks(front).map((r) => [r.setting, r]));
  for (const setting of ['failover_on_backend_shutdown', 'failover_on_backend_error'] as const) {
    const risk = risks.get(setting);
    checks.push(
      risk
        ? { id: `pgpool.${setting}`, verdict: risk.severity, reason: risk.why, fix: risk.fix }
        : { id: `pgpool.${setting}`, verdict: 'ok', reason: `${setting} = ${show(s[setting])}` },
    );
  }
  checks.push({
    id: 'pgpool.allow_sql_comments',
    verdict: 'ok',
    reason: `allow_sql_comments = ${show(s.allow_sql_comments)}: the statements that wait for a lock are sent in the simple query protocol, so pgpool's catalog lookups never wait behind them (with on, the extended protocol stalled the first election after pgpool started for a whole wait slice)`,
  });
  return checks;
}

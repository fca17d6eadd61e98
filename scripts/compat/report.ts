/** The compat driver's closing report: markdown tables. */
import type { FailoverFigures, ServerSettingsFigures } from '../../test/harness/compat-results.js';

export interface Outcome {
  component: string;
  ok: boolean;
  passed: number;
  total: number;
  ms: number;
  note?: string;
  /** Full names of the failed tests. */
  failed?: string[];
}

export interface MajorFigures {
  major: string;
  failover: FailoverFigures | null;
  settings: ServerSettingsFigures | null;
}

function table(header: string[], rows: string[][]): string {
  const line = (cells: string[]): string => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

const seconds = (ms: number): string => `${Math.round(ms / 1000)} s`;
const ms = (v: number | null | undefined): string => (v === null || v === undefined ? 'n/a' : `${v} ms`);

export function outcomesTable(outcomes: Outcome[]): string {
  return table(
    ['component', 'result', 'tests', 'time'],
    outcomes.map((o) => [
      o.component,
      o.ok ? 'pass' : `**fail**${o.note ? ` (${o.note})` : ''}`,
      `${o.passed}/${o.total}`,
      seconds(o.ms),
    ]),
  );
}

export function failoverTable(majors: MajorFigures[]): string {
  return table(
    [
      'PostgreSQL',
      'shutdown → follower leads, p50 / max',
      'pg_terminate_backend → follower leads, p50 / max',
      'trials',
    ],
    majors.map(({ major, failover: f }) => [
      f?.serverVersion ?? major,
      f ? `${f.graceful.p50} / ${f.graceful.max} ms` : 'n/a',
      f ? `${f.terminate.p50} / ${f.terminate.max} ms` : 'n/a',
      f ? `${f.graceful.trials} + ${f.terminate.trials}` : 'n/a',
    ]),
  );
}

export function settingsTable(majors: MajorFigures[]): string {
  return table(
    [
      'PostgreSQL',
      'idle_session_timeout',
      'keepalives idle/interval/count',
      'tcp_user_timeout',
      'client_connection_check_interval',
      'server release / lease',
      'pg_locks.waitstart',
    ],
    majors.map(({ major, settings: s }) =>
      s
        ? [
            s.serverVersion,
            ms(s.idleSessionTimeoutMs),
            s.tcpKeepalives,
            ms(s.tcpUserTimeoutMs),
            ms(s.clientConnectionCheckIntervalMs),
            `${s.serverReleaseMs} / ${s.leaseMs} ms`,
            s.waitstart ? 'yes' : 'no',
          ]
        : [major, 'n/a', 'n/a', 'n/a', 'n/a', 'n/a', 'n/a'],
    ),
  );
}

/** One line per failed test, under its component. */
export function failuresList(outcomes: Outcome[]): string {
  return outcomes
    .filter((o) => !o.ok)
    .flatMap((o) => [
      `- ${o.component}${o.note ? `: ${o.note}` : ''}`,
      ...(o.failed ?? []).map((name) => `  - ${name}`),
    ])
    .join('\n');
}

/**
 * `pgleaderlock doctor`: a preflight of the connection path before a service relies on it.
 * Prints one verdict per check (doctor-checks.ts); exit 0 if nothing fails, 1 if something
 * does, 2 on bad usage.
 */
import {
  type Dsn,
  type Keys,
  type OptionSpec,
  optionalDuration,
  partitionCount,
  positiveInt,
  redact,
  resolveKeys,
  UsageError,
  type Values,
} from './args.js';
import { EXIT } from './common.js';
import { type Check, runChecks } from './doctor-checks.js';
import { endpointChecks } from './doctor-endpoint.js';
import { LOCK_OPTIONS, lockOptions } from './run.js';

export const DOCTOR_OPTIONS: OptionSpec[] = [
  ...LOCK_OPTIONS.filter((o) => o.name === 'health-interval'),
  {
    name: 'partitions',
    type: 'string',
    value: 'P',
    help: 'also check that a PartitionedLeadership with P partitions fits in the server lock table',
  },
  {
    name: 'workers',
    type: 'string',
    value: 'N',
    help: 'with --partitions: how many workers share them (default 1)',
  },
  {
    name: 'timeout',
    type: 'string',
    value: 'DURATION',
    default: '10s',
    help: 'how long each connection and the scratch lock may take',
  },
  {
    name: 'offline',
    type: 'boolean',
    help: 'only judge the connection string from its hosts and ports (provider, mode, the endpoint to use); connect to nothing',
  },
];

/** `--timeout`, 10 s if not given. */
export const timeoutOf = (values: Values): number => optionalDuration(values, 'timeout') ?? 10_000;

/** The key is optional here: without one, the holder check is left out. */
export function doctorKeys(values: Values): Keys | null {
  const given = ['name', 'key1', 'key2'].some((k) => values[k] !== undefined);
  return given ? resolveKeys(values) : null;
}

const MARK: Record<Check['verdict'], string> = { ok: 'ok  ', warn: 'warn', fail: 'FAIL' };

export async function doctor(
  values: Values,
  dsn: Dsn,
  keys: Keys | null,
  json: boolean,
  out: NodeJS.WritableStream,
): Promise<number> {
  const timeoutMs = timeoutOf(values);
  // the options the service would use; a scratch key stands in for the real one
  const options = lockOptions(values, dsn, keys ?? { key1: 0, key2: 0 });
  const checks: Check[] = [];
  if (!json) out.write(`pgleaderlock doctor: ${redact(dsn.url)}\n`);
  if (values.workers !== undefined && values.partitions === undefined) {
    throw new UsageError('--workers is only used with --partitions P');
  }
  const group =
    values.partitions === undefined
      ? null
      : { partitions: partitionCount(values), workers: positiveInt(values, 'workers', 1) };
  const report = (c: Check): void => {
    checks.push(c);
    if (json) return;
    out.write(`${MARK[c.verdict]}  ${c.id.padEnd(19)} ${c.reason}\n`);
    if (c.fix && c.verdict !== 'ok') out.write(`      ${' '.repeat(19)} → ${c.fix}\n`);
  };
  // judged before connecting: shown even when the host cannot be reached from here
  const offline = values.offline === true;
  for (const c of endpointChecks(dsn, offline)) report(c);
  if (!offline) await runChecks({ dsn, keys, lockOptions: options, timeoutMs, group }, report);
  const failed = checks.filter((c) => c.verdict === 'fail').length;
  const warned = checks.filter((c) => c.verdict === 'warn').length;
  if (json) {
    out.write(`${JSON.stringify({ dsn: redact(dsn.url), ok: failed === 0, checks })}\n`);
  } else {
    out.write(
      `${failed ? `${failed} failed` : 'nothing failed'}${warned ? `, ${warned} warning${warned > 1 ? 's' : ''}` : ''} (${checks.length} checks)\n`,
    );
  }
  return failed ? EXIT.NOT_ACQUIRED : EXIT.OK;
}

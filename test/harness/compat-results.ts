/**
 * Figures a compat test hands to the driver (scripts/compat.ts): written as
 * `<name>.json` into the folder named by `$PGLEADERLOCK_COMPAT_RESULTS`, when it is set.
 */
import fs from 'node:fs';
import path from 'node:path';

export const RESULTS_ENV = 'PGLEADERLOCK_COMPAT_RESULTS';

/** p50 (nearest rank) and max of a series, in ms. */
export interface Spread {
  trials: number;
  p50: number;
  max: number;
}

/** failover.json */
export interface FailoverFigures {
  serverVersion: string;
  graceful: Spread;
  terminate: Spread;
}

/** server-settings.json: what the server applied on a leader's session. */
export interface ServerSettingsFigures {
  serverVersion: string;
  idleSessionTimeoutMs: number | null;
  tcpKeepalives: string;
  tcpUserTimeoutMs: number | null;
  clientConnectionCheckIntervalMs: number | null;
  serverReleaseMs: number;
  leaseMs: number;
  waitstart: boolean;
}

export function spread(samples: number[]): Spread {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (i: number): number => Math.round((sorted[i] ?? Number.NaN) * 10) / 10;
  return { trials: sorted.length, p50: at(Math.ceil(sorted.length / 2) - 1), max: at(sorted.length - 1) };
}

export function recordResult(name: 'failover' | 'server-settings', figures: object): void {
  const dir = process.env[RESULTS_ENV];
  if (!dir) return;
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `${name}.json`), `${JSON.stringify(figures, null, 2)}\n`);
}

export function readResult<T>(dir: string, name: 'failover' | 'server-settings'): T | null {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, `${name}.json`), 'utf8')) as T;
  } catch {
    return null;
  }
}

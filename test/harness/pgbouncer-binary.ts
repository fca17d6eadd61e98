/**
 * Where the PgBouncer binary is: `$PGBOUNCER`, else `pgbouncer` on PATH or in /usr/sbin;
 * else (as root, with apt-get) installed from the distribution. The compat project's global
 * setup installs it once; tests only look it up, and fail naming what to install.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export const PGBOUNCER_MISSING =
  'PgBouncer is required for the compat suite: apt-get install pgbouncer, or set PGBOUNCER=/path/to/pgbouncer';

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

function executable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function onPath(name: string, env: NodeJS.ProcessEnv): string | null {
  const dirs = [...(env.PATH ?? '').split(path.delimiter).filter(Boolean), '/usr/sbin', '/usr/local/sbin'];
  for (const dir of dirs) {
    const file = path.join(dir, name);
    if (executable(file)) return file;
  }
  return null;
}

/** The binary if present; throws if `$PGBOUNCER` names something that is not one. */
function lookUp(env: NodeJS.ProcessEnv): string | null {
  const fromEnv = env.PGBOUNCER;
  if (fromEnv) {
    if (!executable(fromEnv)) throw new Error(`PGBOUNCER=${fromEnv} is not an executable file`);
    return fromEnv;
  }
  return onPath('pgbouncer', env);
}

/** Find PgBouncer or throw {@link PGBOUNCER_MISSING}. */
export function findPgBouncer(env: NodeJS.ProcessEnv = process.env): string {
  const found = lookUp(env);
  if (!found) throw new Error(PGBOUNCER_MISSING);
  return found;
}

function aptGet(args: string[]): { ok: boolean; output: string } {
  const r = spawnSync('apt-get', args, {
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    encoding: 'utf8',
    timeout: 600_000,
  });
  return {
    ok: r.status === 0,
    output: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}`,
  };
}

/**
 * Find PgBouncer, installing it with apt-get first when it is missing and this process may
 * (root, apt-get present): `apt-get install -y pgbouncer`, and if that fails, `apt-get
 * update` once and again. Throws {@link PGBOUNCER_MISSING} (with apt's last words) otherwise.
 */
export function ensurePgBouncer(log: (line: string) => void, env: NodeJS.ProcessEnv = process.env): string {
  const found = lookUp(env);
  if (found) return found;
  if (!isRoot || !onPath('apt-get', env)) throw new Error(PGBOUNCER_MISSING);
  log('PgBouncer not found: apt-get install -y pgbouncer');
  let r = aptGet(['install', '-y', 'pgbouncer']);
  if (!r.ok) {
    log('apt-get install failed: apt-get update, then install again');
    aptGet(['update']);
    r = aptGet(['install', '-y', 'pgbouncer']);
  }
  const installed = onPath('pgbouncer', env);
  if (!r.ok || !installed) {
    const tail = r.output.trim().split('\n').slice(-3).join(' | ');
    throw new Error(`${PGBOUNCER_MISSING} (apt-get install pgbouncer failed: ${tail})`);
  }
  return installed;
}

/** `[major, minor]` from `pgbouncer --version` ("PgBouncer 1.18.0"). */
export function pgBouncerVersion(binary: string): [number, number] {
  const out = execFileSync(binary, ['--version'], { encoding: 'utf8' });
  const m = /PgBouncer (\d+)\.(\d+)/.exec(out);
  if (!m) throw new Error(`cannot read the version from "${binary} --version": ${out.split('\n')[0]}`);
  return [Number(m[1]), Number(m[2])];
}

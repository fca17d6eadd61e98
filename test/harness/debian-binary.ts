/**
 * Where the Debian-packaged tools of the compat suite are (PgBouncer, pgpool-II): `$ENV_VAR`,
 * else the binary on PATH or in /usr/sbin; else (as root, with apt-get) installed from the
 * distribution. The compat project's global setup installs them once, the contract project's
 * PgBouncer (test/harness/pgbouncer-setup.ts); tests only look them up, and fail naming what
 * to install.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export interface DebianTool {
  /** What the messages call it. */
  readonly label: string;
  /** The executable's name. */
  readonly binary: string;
  /** The Debian package that installs it. */
  readonly pkg: string;
  /** The environment variable that names the executable instead. */
  readonly envVar: string;
}

export const PGBOUNCER: DebianTool = {
  label: 'PgBouncer',
  binary: 'pgbouncer',
  pkg: 'pgbouncer',
  envVar: 'PGBOUNCER',
};
export const PGPOOL: DebianTool = { label: 'pgpool-II', binary: 'pgpool', pkg: 'pgpool2', envVar: 'PGPOOL' };

/** The message a test fails with when the tool is missing. */
export const missing = (t: DebianTool): string =>
  `${t.label} is required for these tests (npm test's contract suite runs PgBouncer; the compat suite both): apt-get install ${t.pkg}, or set ${t.envVar}=/path/to/${t.binary}`;

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

/**
 * uid/gid to run the tools as: PgBouncer and pgpool refuse to run as root, so as root they
 * run as the `postgres` OS user (the test servers created it if missing). Undefined otherwise.
 */
export function runAsIds(): { uid: number; gid: number } | undefined {
  if (!isRoot) return undefined;
  const id = (flag: string): number =>
    Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

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

/** The binary if present; throws if the environment variable names something that is not one. */
function lookUp(t: DebianTool, env: NodeJS.ProcessEnv): string | null {
  const fromEnv = env[t.envVar];
  if (fromEnv) {
    if (!executable(fromEnv)) throw new Error(`${t.envVar}=${fromEnv} is not an executable file`);
    return fromEnv;
  }
  return onPath(t.binary, env);
}

/** Find the tool or throw {@link missing}. */
export function findTool(t: DebianTool, env: NodeJS.ProcessEnv = process.env): string {
  const found = lookUp(t, env);
  if (!found) throw new Error(missing(t));
  return found;
}

export const findPgBouncer = (env: NodeJS.ProcessEnv = process.env): string => findTool(PGBOUNCER, env);
export const findPgpool = (env: NodeJS.ProcessEnv = process.env): string => findTool(PGPOOL, env);

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
 * Find the tool, installing it with apt-get first when it is missing and this process may
 * (root, apt-get present): `apt-get install -y <pkg>`, and if that fails, `apt-get update`
 * and again. Throws {@link missing} (with apt's last words) otherwise.
 */
export function ensureTool(
  t: DebianTool,
  log: (line: string) => void,
  env: NodeJS.ProcessEnv = process.env,
): string {
  const found = lookUp(t, env);
  if (found) return found;
  if (!isRoot || !onPath('apt-get', env)) throw new Error(missing(t));
  log(`${t.label} not found: apt-get install -y ${t.pkg}`);
  let r = aptGet(['install', '-y', t.pkg]);
  if (!r.ok) {
    log('apt-get install failed: apt-get update, then install again');
    aptGet(['update']);
    r = aptGet(['install', '-y', t.pkg]);
  }
  const installed = onPath(t.binary, env);
  if (!r.ok || !installed) {
    const tail = r.output.trim().split('\n').slice(-3).join(' | ');
    throw new Error(`${missing(t)} (apt-get install ${t.pkg} failed: ${tail})`);
  }
  return installed;
}

/**
 * Resolves once `probe` (a real statement through the tool, never a bare TCP connect:
 * polling a closed port in the ephemeral range can connect a socket to itself) succeeds;
 * rejects with the tool's exit reason when `exited` settles first, or after `timeoutMs`.
 */
export async function untilAnswers(
  t: DebianTool,
  probe: () => Promise<unknown>,
  exited: Promise<string>,
  options: { timeoutMs: number; intervalMs: number },
): Promise<void> {
  let gone: string | null = null;
  void exited.then((why) => {
    gone = why;
  });
  const deadline = performance.now() + options.timeoutMs;
  for (;;) {
    if (gone !== null) throw new Error(gone);
    const ok = await probe().then(
      () => true,
      () => false,
    );
    if (ok) return;
    if (performance.now() > deadline)
      throw new Error(`${t.label} did not answer within ${options.timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, options.intervalMs));
  }
}

/** `[major, minor]` from `pgbouncer --version` ("PgBouncer 1.18.0"). */
export function pgBouncerVersion(binary: string): [number, number] {
  const out = execFileSync(binary, ['--version'], { encoding: 'utf8' });
  const m = /PgBouncer (\d+)\.(\d+)/.exec(out);
  if (!m) throw new Error(`cannot read the version from "${binary} --version": ${out.split('\n')[0]}`);
  return [Number(m[1]), Number(m[2])];
}

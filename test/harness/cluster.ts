/**
 * A replicated PostgreSQL cluster for tests, built from the embedded binaries alone (they
 * ship `initdb`, `pg_ctl` and `postgres`, but no `pg_basebackup`, `pg_rewind` or `psql`).
 *
 * A standby is a base backup taken over SQL: on one session of the upstream,
 * `pg_backup_start` (PG 14: `pg_start_backup`), a file copy of its data directory (minus
 * `postmaster.pid`/`postmaster.opts`, the WAL and the other folders pg_basebackup leaves
 * out), then `pg_backup_stop` (PG 14: `pg_stop_backup`) whose `labelfile` becomes the copy's
 * `backup_label`. The copy gets `standby.signal` and a `primary_conninfo` in
 * `postgresql.auto.conf`, and starts as a hot standby that streams from the upstream.
 * About 0.15–0.4 s per standby on a quiet machine; the nodes are ordinary `PgServer`s (see embedded-pg.ts), so
 * they are killed with the test process like any other test server.
 *
 * Every node runs with the same settings (a hot standby needs `max_connections`,
 * `max_wal_senders`, ... at least as large as its upstream's). `synchronous: true` adds
 * `synchronous_standby_names = '*'` and `synchronous_commit = remote_apply` to the first
 * primary only, so a commit there returns once a standby has applied it; a promoted
 * standby never waits for standbys.
 *
 * Without pg_rewind an old primary cannot rejoin as a standby: `addStandby()` clones a new
 * one from whichever node is primary now.
 */
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { eventually } from './db.js';
import {
  type PgServer,
  type PgServerOptions,
  type StopMode,
  startPgServer,
  TEST_PASSWORD,
  TEST_USER,
} from './pg-server.js';

export type Role = 'primary' | 'standby';

export interface ClusterNode extends PgServer {
  /**
   * SIGKILL the postmaster and every child at once (a hard crash). Unlike `PgServer.kill()`,
   * which signals the postmaster's process group: each PostgreSQL child runs setsid(), so
   * that group holds the postmaster alone and the backends only exit once they notice.
   */
  kill(): Promise<void>;
  /** `node1` (the first primary), `node2`, ...; also the standby's `application_name` upstream. */
  readonly name: string;
  /** `'standby'` while `pg_is_in_recovery()`, else `'primary'`. */
  role(): Promise<Role>;
  /**
   * The timeline this node writes (primary) or replays (standby). On a primary, the first 8
   * hex digits of `pg_walfile_name(pg_current_wal_lsn())`: `pg_control_checkpoint()` still
   * shows the old timeline until the first checkpoint after a promotion, which PostgreSQL
   * runs in the background (promotion writes an end-of-recovery record, not a checkpoint).
   * On a standby (`pg_walfile_name` refuses to run during recovery): the greater of the last
   * restartpoint's `timeline_id` in `pg_control_checkpoint()` and the `received_tli` of its
   * WAL receiver.
   */
  timeline(): Promise<number>;
  /** `SELECT pg_promote(true, 30)`: returns once the node has left recovery. */
  promote(): Promise<void>;
  /**
   * Stream from `upstream` from now on (`ALTER SYSTEM SET primary_conninfo`, reload; PG ≥ 13
   * restarts the WAL receiver). Works after a promotion if this standby has not replayed
   * past the point where `upstream` forked (it follows the new timeline: `latest` is the
   * default `recovery_target_timeline`).
   */
  follow(upstream: ClusterNode): Promise<void>;
  /** Run one statement as the superuser on a short-lived connection. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<R[]>;
}

export interface ClusterOptions {
  /** How many standbys to clone from the primary. Default 1. */
  standbys?: number;
  /** Extra server settings for every node. */
  settings?: Record<string, string | number | boolean>;
  /**
   * Make the first primary wait for a standby on commit (`synchronous_standby_names = '*'`,
   * `synchronous_commit = remote_apply`). Default false (asynchronous replication).
   */
  synchronous?: boolean;
  /** Echo the servers' logs to stderr (debugging). */
  verbose?: boolean;
}

export interface Cluster extends AsyncDisposable {
  /** The node started as primary (it may since have been killed or split-brained). */
  readonly primary: ClusterNode;
  /** The nodes started as standbys, in order (including those added by `addStandby`). */
  readonly standbys: readonly ClusterNode[];
  /** Every node, primary first. */
  readonly nodes: readonly ClusterNode[];
  /**
   * A multi-host URL `postgres://postgres:PASSWORD@127.0.0.1:P1,127.0.0.1:P2/postgres` of
   * `nodes` (default: all) in that order. node-postgres cannot parse it: the consumer must.
   */
  url(nodes?: readonly ClusterNode[]): string;
  /**
   * Wait until every running standby has replayed everything `from` (a primary; default:
   * `primary`) has written. Flushes `from`'s WAL first (a commit with `synchronous_commit = off`, the
   * test servers' default, may still sit in its WAL buffers), then compares its
   * `pg_current_wal_lsn()` with each standby's `pg_last_wal_replay_lsn()`.
   */
  sync(options?: { from?: ClusterNode; timeoutMs?: number }): Promise<void>;
  /** Clone one more standby from `from` (default: the first node that reports `primary`). */
  addStandby(options?: { from?: ClusterNode }): Promise<ClusterNode>;
  /** Stop every node and delete their data directories. Idempotent. */
  dispose(): Promise<void>;
}

/** Settings for replication that every node gets, before `options.settings`. */
function clusterSettings(standbys: number): Record<string, string | number | boolean> {
  return {
    wal_level: 'replica',
    hot_standby: 'on',
    max_wal_senders: Math.max(10, standbys + 2),
    // keep WAL for a standby that was stopped for a while (no slots: nothing to clean up)
    wal_keep_size: '64MB',
    // a standby reconnects (or finds a new timeline) quickly instead of every 5 s
    wal_retrieve_retry_interval: '100ms',
    // asynchronous commits reach the WAL, and so the standbys, within 10 ms
    wal_writer_delay: '10ms',
  };
}

/** Folders whose files a base backup leaves out (as pg_basebackup does); their subfolders are kept. */
const EMPTY_DIRS = new Set([
  'pg_wal',
  'pg_replslot',
  'pg_stat_tmp',
  'pg_dynshmem',
  'pg_notify',
  'pg_serial',
  'pg_snapshots',
  'pg_subtrans',
]);
/** Top-level files a base backup leaves out. */
const SKIP_FILES = new Set([
  'postmaster.pid',
  'postmaster.opts',
  'backup_label',
  'backup_label.old',
  'tablespace_map',
  'tablespace_map.old',
  'standby.signal',
  'recovery.signal',
]);

function isMissing(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'ENOENT';
}

/**
 * Copy a live data directory for a base backup. Files may vanish while we copy (a dropped
 * relation, a removed temporary file): WAL replay recreates whatever is needed.
 */
function copyDataDir(from: string, to: string, filesToo = true, top = true): void {
  fs.mkdirSync(to, { mode: 0o700 });
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(from, { withFileTypes: true });
  } catch (err) {
    if (isMissing(err)) return;
    throw err;
  }
  for (const entry of entries) {
    const src = path.join(from, entry.name);
    const dst = path.join(to, entry.name);
    if (entry.isDirectory()) {
      copyDataDir(src, dst, filesToo && !(top && EMPTY_DIRS.has(entry.name)), false);
    } else if (!filesToo || (top && SKIP_FILES.has(entry.name)) || entry.name === 'pg_internal.init') {
      // left out
    } else if (entry.isSymbolicLink()) {
      // tablespaces (pg_tblspc/<oid>): pg_backup_stop's tablespace_map recreates them
    } else {
      try {
        fs.copyFileSync(src, dst); // keeps the mode bits
      } catch (err) {
        if (!isMissing(err)) throw err;
      }
    }
  }
}

function conninfo(upstream: PgServer, name: string): string {
  return `host=${upstream.host} port=${upstream.port} user=${TEST_USER} password=${TEST_PASSWORD} application_name=${name}`;
}

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-cluster' });
  client.on('error', () => {});
  await client.connect();
  return client;
}

async function superQuery<R extends pg.QueryResultRow>(
  url: string,
  text: string,
  values: unknown[] = [],
): Promise<R[]> {
  const client = await connect(url);
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

/** A new server started from a base backup of `upstream`, streaming from it. */
async function cloneStandby(
  upstream: PgServer,
  name: string,
  serverOptions: PgServerOptions,
): Promise<PgServer> {
  const session = await connect(upstream.url);
  let inBackup = false;
  try {
    const [v] = (await session.query<{ v: number }>("SELECT current_setting('server_version_num')::int AS v"))
      .rows;
    if (!v) throw new Error('no server_version_num');
    const pre15 = v.v < 150000;
    const label = `pgleaderlock-test ${name}`;
    // fast = true: an immediate checkpoint instead of a spread one
    await session.query(
      pre15 ? 'SELECT pg_start_backup($1, true, false)' : 'SELECT pg_backup_start($1, true)',
      [label],
    );
    inBackup = true;
    const populateDataDir = async (dataDir: string): Promise<void> => {
      copyDataDir(upstream.dataDir, dataDir);
      const [stop] = (
        await session.query<{ labelfile: string; spcmapfile: string | null }>(
          pre15
            ? 'SELECT labelfile, spcmapfile FROM pg_stop_backup(false, true)'
            : 'SELECT labelfile, spcmapfile FROM pg_backup_stop(true)',
        )
      ).rows;
      inBackup = false;
      if (!stop) throw new Error('pg_backup_stop returned no row');
      fs.writeFileSync(path.join(dataDir, 'backup_label'), stop.labelfile, { mode: 0o600 });
      if (stop.spcmapfile) {
        fs.writeFileSync(path.join(dataDir, 'tablespace_map'), stop.spcmapfile, { mode: 0o600 });
      }
      fs.writeFileSync(path.join(dataDir, 'standby.signal'), '', { mode: 0o600 });
      fs.appendFileSync(
        path.join(dataDir, 'postgresql.auto.conf'),
        `primary_conninfo = '${conninfo(upstream, name)}'\n`,
      );
    };
    return await startPgServer({ ...serverOptions, populateDataDir });
  } finally {
    // a backup still open ends with its session (non-exclusive backup)
    if (inBackup) await session.query('SELECT 1').catch(() => {});
    await session.end().catch(() => {});
  }
}

async function waitStreaming(node: ClusterNode, timeoutMs = 15_000): Promise<void> {
  await eventually(
    async () => {
      try {
        const [row] = await node.query<{ recovery: boolean; status: string | null }>(
          'SELECT pg_is_in_recovery() AS recovery, (SELECT status FROM pg_stat_wal_receiver) AS status',
        );
        return row?.recovery === true && row.status === 'streaming';
      } catch {
        return false;
      }
    },
    { timeoutMs, intervalMs: 10, what: `${node.name} to stream from its upstream` },
  );
}

/** `pid`'s state letter (R, S, D, T, Z...) from /proc, or null if it is gone or there is no /proc. */
function procState(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // pid (comm) state ppid ...: comm may hold spaces and parentheses
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] ?? null;
  } catch {
    return null;
  }
}

/** Pids of `pid`'s child processes (Linux: /proc), or none where /proc is missing. */
function childrenOf(pid: number): number[] {
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  const children: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) children.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return children;
}

/**
 * SIGKILL the postmaster and all its children at once, and wait until they are dead. Every
 * postmaster child calls setsid(), so the postmaster's process group holds the postmaster
 * alone: killing the group leaves the backends to notice the postmaster's death and exit on
 * their own. Freeze the postmaster (no new children), kill the children, then the postmaster.
 */
async function crash(server: PgServer): Promise<void> {
  const pid = server.pid;
  const signal = (target: number, sig: NodeJS.Signals): void => {
    try {
      process.kill(target, sig);
    } catch {
      // already gone
    }
  };
  let children: number[] = [];
  if (pid !== null && procState(pid) !== null) {
    signal(pid, 'SIGSTOP');
    // the signal is delivered asynchronously: wait until the postmaster is stopped
    await eventually(() => ['T', 'Z', null].includes(procState(pid)), {
      timeoutMs: 2_000,
      intervalMs: 1,
      what: 'the postmaster to stop on SIGSTOP',
    }).catch(() => {});
    children = childrenOf(pid);
    for (const child of children) signal(child, 'SIGKILL');
  }
  await server.kill();
  // a dead child stays a zombie until init reaps it
  await eventually(() => children.every((c) => (procState(c) ?? 'Z') === 'Z'), {
    timeoutMs: 5_000,
    intervalMs: 1,
    what: 'the killed backends to die',
  });
}

/** Nodes not yet disposed, across clusters: killed and deleted if the process is ended. */
const liveNodes = new Set<ClusterNode>();
let cleanupInstalled = false;

/**
 * Vitest ends a test file's worker with SIGTERM, and Ctrl-C sends SIGINT: Node's default
 * action for both ends the process without an 'exit' event, so embedded-pg.ts' exit hook
 * never runs and the servers (and their data directories) outlive the run. On those
 * signals, and on 'exit', kill every live node (postmaster and children) and delete its
 * folder synchronously; then, if nobody else handles the signal, raise it again so the
 * process ends as it would have.
 */
function installCleanup(): void {
  if (cleanupInstalled) return;
  cleanupInstalled = true;
  const cleanup = (): void => {
    for (const node of liveNodes) {
      const pid = node.pid;
      if (pid !== null) {
        try {
          process.kill(pid, 'SIGSTOP');
          for (const child of childrenOf(pid)) process.kill(child, 'SIGKILL');
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone
        }
      }
      try {
        fs.rmSync(path.dirname(node.dataDir), { recursive: true, force: true });
      } catch {
        // a dying process may still have written into it: leave it
      }
    }
    liveNodes.clear();
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    cleanup();
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.once('exit', cleanup);
}

function makeNode(name: string, server: PgServer): ClusterNode {
  const query = <R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values: unknown[] = []) =>
    superQuery<R>(server.url, text, values);
  const node: ClusterNode = {
    name,
    get host() {
      return server.host;
    },
    get port() {
      return server.port;
    },
    get url() {
      return server.url;
    },
    get dataDir() {
      return server.dataDir;
    },
    get pid() {
      return server.pid;
    },
    get running() {
      return server.running;
    },
    start: () => server.start(),
    stop: (mode?: StopMode) => server.stop(mode),
    kill: () => crash(server),
    restart: (mode?: StopMode) => server.restart(mode),
    dispose: async () => {
      await server.dispose();
      liveNodes.delete(node);
    },
    [Symbol.asyncDispose]: () => node.dispose(),
    query,
    async role() {
      const [row] = await query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery');
      return row?.recovery ? 'standby' : 'primary';
    },
    async timeline() {
      const [row] = await query<{
        walfile: string | null;
        checkpoint_tli: number;
        received_tli: number | null;
      }>(
        `SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END AS walfile,
                (SELECT timeline_id FROM pg_control_checkpoint()) AS checkpoint_tli,
                (SELECT received_tli FROM pg_stat_wal_receiver) AS received_tli`,
      );
      if (!row) throw new Error(`${name}: no timeline`);
      if (row.walfile) return Number.parseInt(row.walfile.slice(0, 8), 16);
      return Math.max(row.checkpoint_tli, row.received_tli ?? 0);
    },
    async promote() {
      const [row] = await query<{ promoted: boolean }>('SELECT pg_promote(true, 30) AS promoted');
      if (!row?.promoted) throw new Error(`${name}: pg_promote did not finish within 30 s`);
    },
    async follow(upstream: ClusterNode) {
      await query(`ALTER SYSTEM SET primary_conninfo = '${conninfo(upstream, name)}'`);
      await query('SELECT pg_reload_conf()');
      await waitStreaming(node);
    },
  };
  installCleanup();
  liveNodes.add(node);
  return node;
}

/** Start a primary and `standbys` streaming hot standbys (see the top of this file). */
export async function startCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const standbyCount = options.standbys ?? 1;
  const settings = { ...clusterSettings(standbyCount), ...(options.settings ?? {}) };
  const primarySettings = options.synchronous
    ? { ...settings, synchronous_standby_names: '*', synchronous_commit: 'remote_apply' }
    : settings;
  const verbose = options.verbose ?? false;
  const nodes: ClusterNode[] = [];
  const standbys: ClusterNode[] = [];
  let disposed = false;

  const dispose = async (): Promise<void> => {
    if (disposed) return;
    disposed = true;
    await Promise.all(nodes.map((n) => n.dispose()));
  };

  const addStandby = async (from?: ClusterNode): Promise<ClusterNode> => {
    let upstream = from;
    if (!upstream) {
      for (const n of nodes) {
        if (n.running && (await n.role().catch(() => null)) === 'primary') {
          upstream = n;
          break;
        }
      }
    }
    if (!upstream) throw new Error('addStandby: no running primary to clone');
    const name = `node${nodes.length + 1}`;
    const server = await cloneStandby(upstream, name, { settings, verbose });
    const node = makeNode(name, server);
    nodes.push(node);
    standbys.push(node);
    await waitStreaming(node);
    return node;
  };

  const primary = makeNode('node1', await startPgServer({ settings: primarySettings, verbose }));
  nodes.push(primary);
  try {
    // one at a time: node names follow the order, and a clone costs ~0.3 s
    for (let i = 0; i < standbyCount; i++) await addStandby(primary);
  } catch (err) {
    await dispose();
    throw err;
  }

  const cluster: Cluster = {
    primary,
    standbys,
    nodes,
    url(list: readonly ClusterNode[] = nodes) {
      if (list.length === 0) throw new Error('url: no nodes');
      const hosts = list.map((n) => `${n.host}:${n.port}`).join(',');
      return `postgres://${TEST_USER}:${encodeURIComponent(TEST_PASSWORD)}@${hosts}/postgres`;
    },
    async sync({ from = primary, timeoutMs = 10_000 } = {}) {
      const client = await connect(from.url);
      let target: string;
      try {
        // The servers run synchronous_commit = off. A synchronous commit flushes every earlier
        // commit's WAL, but only if the transaction wrote WAL before its commit record (an xid
        // alone, txid_current(), commits asynchronously): a transactional logical message does
        await client.query('BEGIN');
        await client.query('SET LOCAL synchronous_commit = local');
        await client.query("SELECT pg_logical_emit_message(true, 'pgleaderlock-test-sync', '')");
        await client.query('COMMIT');
        const [row] = (await client.query<{ lsn: string }>('SELECT pg_current_wal_flush_lsn()::text AS lsn'))
          .rows;
        if (!row) throw new Error('sync: no pg_current_wal_lsn()');
        target = row.lsn;
      } finally {
        await client.end().catch(() => {});
      }
      const replayed = new Map<string, string | null>();
      const waitFor = async (n: ClusterNode): Promise<void> => {
        try {
          await eventually(
            async () => {
              const [row] = await n
                .query<{ recovery: boolean; replay: string | null; done: boolean | null }>(
                  `SELECT pg_is_in_recovery() AS recovery, pg_last_wal_replay_lsn()::text AS replay,
                          pg_last_wal_replay_lsn() >= $1::pg_lsn AS done`,
                  [target],
                )
                .catch(() => []);
              replayed.set(n.name, row?.replay ?? null);
              // a promoted node has nothing to replay
              return row?.recovery === false || row?.done === true;
            },
            { timeoutMs, intervalMs: 5 },
          );
        } catch {
          throw new Error(
            `sync: ${n.name} has replayed ${from.name}'s WAL up to ${replayed.get(n.name)}, not ${target}, after ${timeoutMs} ms`,
          );
        }
      };
      await Promise.all(nodes.filter((n) => n !== from && n.running).map(waitFor));
    },
    addStandby: ({ from } = {}) => addStandby(from),
    dispose,
    [Symbol.asyncDispose]: dispose,
  };
  return cluster;
}

/**
 * Promote `node` and return when it left recovery (on `performance.now()`), as seen by
 * polling `pg_is_in_recovery()` every millisecond on a connection opened beforehand
 * (`pg_promote(true)` itself only looks every 100 ms).
 */
export async function promoteNow(node: ClusterNode): Promise<number> {
  const client = new pg.Client({ connectionString: node.url });
  client.on('error', () => {});
  await client.connect();
  try {
    await client.query('SELECT pg_promote(false)');
    for (;;) {
      const { rows } = await client.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r');
      if (rows[0]?.r === false) return performance.now();
      await new Promise((r) => setTimeout(r, 1));
    }
  } finally {
    await client.end();
  }
}

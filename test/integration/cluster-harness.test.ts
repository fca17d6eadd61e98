/**
 * The replicated cluster harness (test/harness/cluster.ts) against real servers: streaming,
 * promotion after a crash, split brain, several standbys, clean disposal. Prints the
 * timings a failover test can budget for.
 */
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type Cluster, type ClusterNode, startCluster } from '../harness/cluster.js';
import { eventually, randomKeys } from '../harness/db.js';
import { TEST_PASSWORD } from '../harness/pg-server.js';

function ms(since: number): number {
  return Math.round(performance.now() - since);
}

/**
 * Live processes whose working directory is one of `dataDirs` (a postmaster and all its
 * children chdir to the data directory; a deleted directory reads as "<dir> (deleted)").
 */
function serverProcesses(dataDirs: string[]): number[] {
  const found: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cwd = fs.readlinkSync(`/proc/${entry}/cwd`).replace(/ \(deleted\)$/, '');
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
      if (state !== 'Z' && dataDirs.includes(cwd)) found.push(Number(entry));
    } catch {
      // exited meanwhile, or not ours to inspect
    }
  }
  return found;
}

/** Writes a row, retrying until the node accepts writes. */
async function writeWhenWritable(node: ClusterNode, value: string): Promise<void> {
  await eventually(
    async () => {
      try {
        await node.query('INSERT INTO harness_t (v) VALUES ($1)', [value]);
        return true;
      } catch {
        return false;
      }
    },
    { timeoutMs: 10_000, intervalMs: 5, what: `${node.name} to accept writes` },
  );
}

async function values(node: ClusterNode): Promise<string[]> {
  const rows = await node.query<{ v: string }>('SELECT v FROM harness_t ORDER BY id');
  return rows.map((r) => r.v);
}

async function createTable(cluster: Cluster): Promise<void> {
  await cluster.primary.query('CREATE TABLE harness_t (id serial PRIMARY KEY, v text NOT NULL)');
}

describe('cluster harness', () => {
  it('a standby is a streaming hot standby: what the primary writes appears there after sync()', {
    tags: ['pg-major'],
  }, async () => {
    const t0 = performance.now();
    await using cluster = await startCluster();
    console.log(`[cluster] 1-standby cluster built in ${ms(t0)} ms`);
    const [standby] = cluster.standbys;
    if (!standby) throw new Error('no standby');
    expect(cluster.nodes).toEqual([cluster.primary, standby]);
    expect(standby.port).not.toBe(cluster.primary.port);

    expect(await cluster.primary.role()).toBe('primary');
    expect(await standby.role()).toBe('standby');
    const [receiver] = await standby.query<{ status: string; sender_port: number }>(
      'SELECT status, sender_port FROM pg_stat_wal_receiver',
    );
    expect(receiver).toMatchObject({ status: 'streaming', sender_port: cluster.primary.port });
    const senders = await cluster.primary.query<{
      application_name: string;
      state: string;
      sync_state: string;
    }>('SELECT application_name, state, sync_state FROM pg_stat_replication');
    expect(senders).toEqual([{ application_name: standby.name, state: 'streaming', sync_state: 'async' }]);
    expect(await cluster.primary.timeline()).toBe(1);
    expect(await standby.timeline()).toBe(1);

    await createTable(cluster);
    await cluster.primary.query("INSERT INTO harness_t (v) VALUES ('one')");
    await cluster.sync();
    expect(await values(standby)).toEqual(['one']);
    await expect(standby.query("INSERT INTO harness_t (v) VALUES ('no')")).rejects.toMatchObject({
      code: '25006', // read_only_sql_transaction
    });

    const hosts = `127.0.0.1:${cluster.primary.port},127.0.0.1:${standby.port}`;
    expect(cluster.url()).toBe(`postgres://postgres:${TEST_PASSWORD}@${hosts}/postgres`);
    expect(cluster.url([standby])).toBe(standby.url);
  });

  it('promoted after the primary is SIGKILLed, a standby leaves recovery on a later timeline', {
    tags: ['pg-major'],
  }, async () => {
    await using cluster = await startCluster();
    const [standby] = cluster.standbys;
    if (!standby) throw new Error('no standby');
    await createTable(cluster);
    await cluster.primary.query("INSERT INTO harness_t (v) VALUES ('before')");
    await cluster.sync();
    const oldTimeline = await cluster.primary.timeline();

    expect(serverProcesses([cluster.primary.dataDir]).length).toBeGreaterThan(4);
    const tKill = performance.now();
    await cluster.primary.kill();
    const killMs = ms(tKill);
    expect(cluster.primary.running).toBe(false);
    // every process at once, not only the postmaster
    expect(serverProcesses([cluster.primary.dataDir])).toEqual([]);
    const t0 = performance.now();
    await standby.promote();
    const promoteMs = ms(t0);
    expect(await standby.role()).toBe('primary');
    // pg_control_checkpoint() lags until the first checkpoint after the promotion; timeline() does not
    const [checkpoint] = await standby.query<{ tli: number }>(
      'SELECT timeline_id AS tli FROM pg_control_checkpoint()',
    );
    const newTimeline = await standby.timeline();
    expect(newTimeline).toBeGreaterThan(oldTimeline);
    await writeWhenWritable(standby, 'after');
    const writableMs = ms(t0);
    console.log(
      `[cluster] primary killed in ${killMs} ms; pg_promote returned in ${promoteMs} ms; writable ${writableMs} ms after the call; ` +
        `timeline ${oldTimeline} -> ${newTimeline} (pg_control_checkpoint() said ${checkpoint?.tli} right after)`,
    );
    expect(await values(standby)).toEqual(['before', 'after']);

    // the old primary cannot rejoin (no pg_rewind): clone a new standby from the new primary
    const t1 = performance.now();
    const clone = await cluster.addStandby();
    console.log(`[cluster] addStandby after the failover: ${ms(t1)} ms`);
    expect(clone.name).toBe('node3');
    expect(await clone.role()).toBe('standby');
    await standby.query("INSERT INTO harness_t (v) VALUES ('cloned')");
    await cluster.sync({ from: standby });
    expect(await values(clone)).toEqual(['before', 'after', 'cloned']);
    expect(await clone.timeline()).toBe(newTimeline);
  });

  it('promoted while the old primary runs: two primaries, both take writes and the same advisory lock', {
    tags: ['pg-major'],
  }, async () => {
    await using cluster = await startCluster();
    const [standby] = cluster.standbys;
    if (!standby) throw new Error('no standby');
    await createTable(cluster);
    await cluster.sync();

    await standby.promote();
    expect(await cluster.primary.role()).toBe('primary');
    expect(await standby.role()).toBe('primary');
    expect(await cluster.primary.timeline()).toBe(1);
    expect(await standby.timeline()).toBe(2);

    await cluster.primary.query("INSERT INTO harness_t (v) VALUES ('old')");
    await standby.query("INSERT INTO harness_t (v) VALUES ('new')");
    expect(await values(cluster.primary)).toEqual(['old']);
    expect(await values(standby)).toEqual(['new']);
    // the old primary no longer streams to anyone
    expect(await cluster.primary.query('SELECT pid FROM pg_stat_replication')).toEqual([]);

    // advisory locks are per server: each primary grants the same key
    const { key1, key2 } = randomKeys();
    const sessions = [new pg.Client(cluster.primary.url), new pg.Client(standby.url)];
    try {
      for (const c of sessions) {
        c.on('error', () => {});
        await c.connect();
      }
      for (const c of sessions) {
        const { rows } = await c.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS ok', [
          key1,
          key2,
        ]);
        expect(rows[0]?.ok).toBe(true);
      }
    } finally {
      await Promise.all(sessions.map((c) => c.end().catch(() => {})));
    }
  });

  it('two standbys stream; after a failover the other standby can follow the new primary', async () => {
    await using cluster = await startCluster({ standbys: 2 });
    const [a, b] = cluster.standbys;
    if (!a || !b) throw new Error('expected two standbys');
    expect(cluster.nodes.map((n) => n.name)).toEqual(['node1', 'node2', 'node3']);
    const senders = await cluster.primary.query<{ application_name: string }>(
      "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming' ORDER BY 1",
    );
    expect(senders.map((s) => s.application_name)).toEqual(['node2', 'node3']);
    await createTable(cluster);
    await cluster.primary.query("INSERT INTO harness_t (v) VALUES ('one')");
    await cluster.sync();
    expect(await values(a)).toEqual(['one']);
    expect(await values(b)).toEqual(['one']);

    await cluster.primary.kill();
    await a.promote();
    await b.follow(a);
    await a.query("INSERT INTO harness_t (v) VALUES ('two')");
    await cluster.sync({ from: a });
    expect(await values(b)).toEqual(['one', 'two']);
    expect(await b.role()).toBe('standby');
    expect(await b.timeline()).toBe(2);
  });

  it('synchronous: a commit on the primary is already applied on the standby; dispose leaves nothing behind', async () => {
    await using cluster = await startCluster({ synchronous: true });
    const [standby] = cluster.standbys;
    if (!standby) throw new Error('no standby');
    const [sender] = await cluster.primary.query<{ sync_state: string }>(
      'SELECT sync_state FROM pg_stat_replication',
    );
    expect(sender?.sync_state).toBe('sync');
    await createTable(cluster);
    await cluster.primary.query("INSERT INTO harness_t (v) VALUES ('applied')");
    expect(await values(standby)).toEqual(['applied']); // remote_apply: no sync() needed

    const dataDirs = cluster.nodes.map((n) => n.dataDir);
    // postmasters, walsender, walreceiver, startup, checkpointer...
    expect(serverProcesses(dataDirs).length).toBeGreaterThan(4);
    // each data directory's temporary parent folder
    const dirs = dataDirs.map((d) => path.dirname(d));
    expect(dirs.every((d) => fs.existsSync(d))).toBe(true);

    await cluster.dispose();
    await cluster.dispose(); // idempotent
    expect(serverProcesses(dataDirs)).toEqual([]);
    expect(dirs.filter((d) => fs.existsSync(d))).toEqual([]);
    expect(cluster.nodes.every((n) => !n.running)).toBe(true);
  });
});

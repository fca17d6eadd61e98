/**
 * A partition worker whose connection string lists a host that never answers (docs/partitions.md,
 * "Primary failover"): the survey got no word from it, so it may be an old primary slow to
 * answer beside this one. The worker's takes carry the split-brain fence
 * (`healthIntervalMs + 250 ms`, on top of the takeover delay for a take that proves no
 * hand-over) until that host has missed UNHEARD_ROUNDS peer-watch rounds, then no longer.
 */
import { expect, it } from 'vitest';
import { UNHEARD_ROUNDS } from '../../src/core/peers.js';
import type { LogFields } from '../../src/index.js';
import { databaseUrl, eventually, testTag } from '../harness/db.js';
import { silentServer } from '../harness/silent-server.js';
import { partitionWorker } from '../harness/workers.js';

const P = 4;
const HEALTH_MS = 500;
const TAKEOVER_MS = 200;
/** The split-brain fence: on top of the takeover delay (a first take proves no hand-over). */
const FENCE_MS = HEALTH_MS + 250;

it(`a listed host that never answers: the first takes open ${TAKEOVER_MS + FENCE_MS} ms after the take (takeoverDelayMs ${TAKEOVER_MS} + healthIntervalMs ${HEALTH_MS} + 250), never earlier; after ${UNHEARD_ROUNDS} peer-watch rounds a clean hand-over opens at once (under 50 ms)`, async () => {
  const silent = await silentServer();
  try {
    const url = databaseUrl();
    const { host } = new URL(url);
    const listed = url.replace(`${host}/`, `${host},127.0.0.1:${new URL(silent.url(url)).port}/`);
    expect(listed).not.toBe(url);
    const tag = testTag();
    const takes: { worker: string; partitions: number[]; delayMs: number; at: number }[] = [];
    const runs: { worker: string; p: number; start: number }[] = [];
    const worker = (id: string, connectionString: string) => {
      const quiet = () => {};
      const w = partitionWorker({
        name: `unheard-${tag}`,
        id: `${tag}-${id}`,
        partitions: P,
        connectionString,
        healthIntervalMs: HEALTH_MS,
        takeoverDelayMs: TAKEOVER_MS,
        logger: {
          debug: quiet,
          warn: quiet,
          error: quiet,
          info: (fields: LogFields) => {
            if (fields.event !== 'partitions_taken') return;
            const { partitions, delayMs } = fields as unknown as { partitions: number[]; delayMs: number };
            takes.push({ worker: id, partitions, delayMs, at: performance.now() });
          },
        },
      });
      w.runForEach(async (p, term) => {
        runs.push({ worker: id, p, start: performance.now() });
        await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      });
      return w;
    };
    const opened = (t: (typeof takes)[number]) =>
      t.partitions.map((p) => {
        const run = runs.find((r) => r.worker === t.worker && r.p === p && r.start >= t.at);
        return run ? run.start - t.at : null;
      });

    const a = worker('a', listed);
    await a.start();
    await eventually(() => runs.filter((r) => r.worker === 'a').length === P, {
      what: 'a to run every partition',
      timeoutMs: 5000,
    });
    const first = takes.filter((t) => t.worker === 'a');
    const firstOpened = first.flatMap(opened);
    // the silent host's rounds: the first waits for its 250 ms deadline, the next find its
    // attempt still connecting; give them a second more on a loaded machine
    await new Promise((r) => setTimeout(r, UNHEARD_ROUNDS * (HEALTH_MS + 250) + 1000));
    // b lists only the server (no peer watch): a hands it half, then takes that back when b leaves
    const b = worker('b', url);
    await b.start();
    await eventually(() => a.owned.size === P / 2 && b.owned.size === P / 2, { what: 'a 2/2 split' });
    const leftAt = performance.now();
    await b.shutdown();
    await eventually(() => a.owned.size === P, { what: 'a to take back b’s share' });
    const back = takes.filter((t) => t.worker === 'a' && t.at >= leftAt);
    const backOpened = back.flatMap(opened);
    await a.shutdown();
    console.log(
      `[partitions, a host that never answers] first takes: ${first.map((t) => `${t.delayMs} ms logged`).join(', ')}, opened ${firstOpened.map((x) => x?.toFixed(1)).join(', ')} ms after; after the rounds: ${back.map((t) => `${t.delayMs} ms logged`).join(', ')}, opened ${backOpened.map((x) => x?.toFixed(1)).join(', ')} ms after`,
    );
    expect(first.length).toBeGreaterThanOrEqual(1);
    for (const t of first) expect(t.delayMs).toBe(TAKEOVER_MS + FENCE_MS);
    for (const ms of firstOpened) expect(ms).toBeGreaterThanOrEqual(TAKEOVER_MS + FENCE_MS - 1);
    expect(back.flatMap((t) => t.partitions)).toHaveLength(P / 2);
    for (const t of back) expect(t.delayMs).toBe(0);
    for (const ms of backOpened) expect(ms).toBeLessThan(50);
  } finally {
    await silent.close();
  }
}, 30_000);

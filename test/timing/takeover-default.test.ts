/**
 * docs/safety.md, "Choosing the value": the default takeover delay (250 ms) covers the old
 * leader's detection and work that stops within about 200 ms of its abort. Candidates in
 * processes of their own; the old leader stays out after its loss, so it sends no proof of
 * drain and the next leader waits the whole delay.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_TAKEOVER_DELAY_MS } from '../../src/core/shared-options.js';
import { type Report, useCandidates } from '../harness/candidates.js';
import { adminClient, databaseUrl, eventually, holderPid } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();
const candidates = useCandidates(() => locks.tag);

/** Terminate the leader's backend; the old and the next leader's runs of that handover. */
async function terminateRound(c: ReturnType<typeof candidates>, round: number) {
  await using admin = await adminClient(databaseUrl());
  // processes started under tsx: slow to boot on a loaded machine
  await eventually(() => c.reports.filter((r) => r.ev === 'ready').length === c.procs.size, {
    timeoutMs: 30_000,
    what: 'every candidate started',
  });
  await eventually(() => c.runs('run-start').length === round + 1, {
    timeoutMs: 10_000,
    what: `leader ${round + 1}`,
  });
  const old = c.runs('run-start')[round] as Report;
  await admin.terminate(await holderPid(databaseUrl(), c.keys.key1, c.keys.key2));
  await eventually(
    () =>
      c.runs('run-start').length === round + 2 &&
      c.runs('run-end').some((r) => r.id === old.id && r.term === old.term),
    { timeoutMs: 10_000, intervalMs: 2, what: `leader ${round + 2} and the old work’s end` },
  );
  const next = c.runs('run-start')[round + 1] as Report;
  const oldEnd = c.runs('run-end').find((r) => r.id === old.id && r.term === old.term) as Report;
  expect(next.id).not.toBe(old.id);
  return { old, next, oldEnd };
}

describe('the default takeover delay (wait mode)', () => {
  it('is 250 ms, and covers leader work that stops 200 ms after its abort: after pg_terminate_backend the next leader’s work starts after the old work stopped (3 rounds)', async () => {
    expect(DEFAULT_TAKEOVER_DELAY_MS).toBe(250);
    const c = candidates('wait', DEFAULT_TAKEOVER_DELAY_MS, 4, false, 200);
    const margins: number[] = [];
    for (let round = 0; round < 3; round++) {
      const { next, oldEnd } = await terminateRound(c, round);
      margins.push(next.at - oldEnd.at);
    }
    console.log(
      `[takeover default] work stopping 200 ms after its abort: the next leader's work started ${margins.map((m) => m.toFixed(0)).join(', ')} ms after the old work stopped`,
    );
    for (const m of margins) expect(m).toBeGreaterThan(0);
  });

  it('and does not cover work that takes 500 ms to stop: the two leaders’ work overlaps (the check above can fail)', async () => {
    const c = candidates('wait', DEFAULT_TAKEOVER_DELAY_MS, 2, false, 500);
    const { next, oldEnd } = await terminateRound(c, 0);
    console.log(
      `[takeover default] work stopping 500 ms after its abort: the next leader's work started ${(oldEnd.at - next.at).toFixed(0)} ms before the old work stopped`,
    );
    expect(next.at).toBeLessThan(oldEnd.at);
  });
});

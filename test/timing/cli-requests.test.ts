/**
 * How long `pgleaderlock resign` and `pgleaderlock handover` take (docs/cli.md): from the
 * request on the key's channel to the leader's release, and to the next holder's grant, as
 * the command measures and prints them (`--json`), for leaders whose work stops at its
 * abort. Medians of 7 trials per acquire mode; alone, after the parallel projects.
 *
 * Each against a baseline measured in the same trials (issue 37): the same exchange between
 * bare `pg` clients on the same server (a request NOTIFY heard by a holder that unlocks and
 * NOTIFYs `released`, a waiter granted that NOTIFYs `acquired`, both heard by the requester),
 * so that load on the machine moves both; a timer, a poll or a delay added to the library's
 * release or grant still fails (35, 35 and 50 ms were recorded under load against the
 * earlier fixed bounds of 30, 30 and 50: docs/cli.md).
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type Deferred, deferred } from '../../src/core/clock.js';
import { expectNearBaseline } from '../harness/baseline.js';
import { cli } from '../harness/cli.js';
import { databaseUrl, eventually, lockHolders, randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { median } from '../harness/stats.js';
import { type Mode, useTeam } from '../harness/team.js';

const locks = useLocks();
const team = useTeam(locks);
const TRIALS = 7;

/**
 * The physical limit of a resign, between bare clients: from sending the request to hearing
 * the holder's `released` (it unlocks, then notifies) and the waiter's `acquired` (granted,
 * then notifies), the connections opened and the waiter queued beforehand.
 */
async function bareResign(): Promise<{ released: number; next: number }> {
  const { key1, key2 } = randomKeys();
  const channel = `bare_${key1}_${key2}`;
  const clients = [0, 1, 2].map(
    () => new pg.Client({ connectionString: databaseUrl(), application_name: 'pgleaderlock-test-bare' }),
  );
  const [requester, holder, waiter] = clients as [pg.Client, pg.Client, pg.Client];
  try {
    await Promise.all(clients.map((c) => c.connect()));
    const notify = (c: pg.Client, payload: string) => c.query(`NOTIFY "${channel}", '${payload}'`);
    await holder.query('SELECT pg_advisory_lock($1, $2)', [key1, key2]);
    await holder.query(`LISTEN "${channel}"`);
    await requester.query(`LISTEN "${channel}"`);
    // the holder's unlock and NOTIFY: awaited before the clients end (the requester can hear
    // `released` before the holder reads its NOTIFY's reply; ending it then rejected that query
    // with no handler: an unhandled rejection in a CI run of 2026-12-02)
    const holderWork: Promise<unknown>[] = [];
    holder.on('notification', (m) => {
      if (m.payload === 'request') {
        const work = holder
          .query('SELECT pg_advisory_unlock($1, $2)', [key1, key2])
          .then(() => notify(holder, 'released'));
        work.catch(() => {}); // a failed round fails through the awaits above, not unhandled
        holderWork.push(work);
      }
    });
    const heard: Record<string, Deferred<number>> = { released: deferred(), acquired: deferred() };
    requester.on('notification', (m) => heard[m.payload ?? '']?.resolve(performance.now()));
    const granted = waiter
      .query('SELECT pg_advisory_lock($1, $2)', [key1, key2])
      .then(() => notify(waiter, 'acquired'));
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 2, {
      what: 'the bare waiter to queue',
      intervalMs: 5,
    });
    const t0 = performance.now();
    await notify(requester, 'request');
    const [released, acquired] = await Promise.all([
      heard.released?.promise,
      heard.acquired?.promise,
      granted,
    ]);
    await Promise.all(holderWork);
    return { released: (released as number) - t0, next: (acquired as number) - t0 };
  } finally {
    await Promise.all(clients.map((c) => c.end().catch(() => {})));
  }
}

describe.each(['wait', 'poll'] as Mode[])('resign and handover timings (%s mode)', (mode) => {
  it(`resign: released p50 ≤ 3 × bare clients' + 25 ms after the request (wait mode: the first waiter holds the lock within the same of a bare waiter); handover: the successor holds it p50 ≤ 3 × a bare waiter's grant + 45 ms (${TRIALS} trials each, the bare exchange interleaved)`, async () => {
    const t = team(mode);
    const a = t.make();
    await t.leading(a);
    const b = t.make();
    await b.start();
    await t.waiting(b);
    const c = t.make();
    await c.start();
    await t.waiting(c);
    const all = [a, b, c];
    const released: number[] = [];
    const next: number[] = [];
    const handedOver: number[] = [];
    const bare: { released: number; next: number }[] = [];
    for (let i = 0; i < TRIALS; i++) {
      // the baseline in the same trial, before or after the command by turns
      if (i % 2 === 0) bare.push(await bareResign());
      // everyone but the leader waits before each request
      for (const l of all) if (!l.isLeader) await t.waiting(l);
      const r = await cli(['resign', ...t.args(), '--json']);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      const o = JSON.parse(r.stdout) as {
        releasedMs: number;
        nextMs: number | null;
        next: string | null;
        resigned: string;
      };
      expect(o.next).not.toBeNull();
      released.push(o.releasedMs);
      // wait mode: the first waiter is granted the lock; poll mode: whoever attempts first
      // (the resigned leader too, after its back-off): no figure of the command's own
      if (mode === 'wait') {
        expect(o.next).not.toBe(o.resigned);
        next.push(o.nextMs as number);
      }
      const leader = all.find((l) => l.id === o.next) ?? a;
      await eventually(() => leader.isLeader, { what: `${leader.id} to lead` });

      const to = all.find((l) => l !== leader) ?? a;
      for (const l of all) if (l !== leader) await t.waiting(l);
      const h = await cli(['handover', ...t.args(), '--to', to.id, '--json']);
      expect(h.code, h.stdout + h.stderr).toBe(0);
      handedOver.push((JSON.parse(h.stdout) as { acquiredMs: number }).acquiredMs);
      await eventually(() => to.isLeader, { what: `${to.id} to lead` });
      if (i % 2 === 1) bare.push(await bareResign());
    }
    const figures = {
      released: median(released),
      next: mode === 'wait' ? median(next) : null,
      handover: median(handedOver),
    };
    console.log(
      `[cli requests, ${mode}] resign → released p50 ${figures.released} ms (${released.join(', ')}); → next holder p50 ${figures.next ?? '-'} ms (${next.join(', ')}); handover → successor holds p50 ${figures.handover} ms (${handedOver.join(', ')})`,
    );
    const bareReleased = bare.map((b) => b.released);
    const bareNext = bare.map((b) => b.next);
    console.log(
      `[cli requests, ${mode}] bare clients: request → released p50 ${median(bareReleased).toFixed(1)} ms (${bareReleased.map((x) => x.toFixed(1)).join(', ')}); → the waiter's acquired p50 ${median(bareNext).toFixed(1)} ms`,
    );
    // the library's statements, callbacks and the command's parsing on top of the bare
    // exchange: 25 ms (45 for a handover, whose successor is told by the leader first), and
    // three times the bare figure for a machine whose load slows every process alike
    expectNearBaseline(
      `${mode}: resign → released, against bare clients`,
      { subject: released, baseline: bareReleased },
      { ratio: 3, overMs: 25 },
    );
    if (mode === 'wait')
      expectNearBaseline(
        `${mode}: resign → the next holder's grant, against bare clients`,
        { subject: next, baseline: bareNext },
        { ratio: 3, overMs: 25 },
      );
    expectNearBaseline(
      `${mode}: handover → the successor holds the lock, against bare clients' resign → grant`,
      { subject: handedOver, baseline: bareNext },
      { ratio: 3, overMs: 45 },
    );
  }, 120_000); // the bare rounds and a loaded machine: 60 s ran out at load 20
});

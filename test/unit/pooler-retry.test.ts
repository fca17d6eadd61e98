/**
 * A pooler check that could not be completed at connect (the probe failed or got no answer
 * in time) is no definite refusal: both elections report it to `onError` and retry on
 * their retry strategy, as a failed connection. Only a definite refusal
 * (`ERR_PGLEADERLOCK_UNSAFE` from a check that completed) before the run's first session
 * ends the run: a partition worker's `start()` rejects, a LeaderLock stops (docs/safety.md,
 * "Poolers"; core/errors.ts, `endsTheRun`). Found
 * by the simulation (seed 255469445: a worker stayed stopped after one probe reset during
 * its start). Fake server behind a session-mode pooler, fake clock.
 */
import { describe, expect, it } from 'vitest';
import { isDefiniteRefusal } from '../../src/core/errors.js';
import { FixedInterval, PartitionedLeadership } from '../../src/index.js';
import { FakeClock, FakeDb, flush } from './fakes.js';
import { makeLock } from './helpers.js';

function worker(probe: 'error' | 'hang' | 'marked') {
  const clock = new FakeClock();
  const db = new FakeDb(clock);
  db.sessionPooler = { probe };
  const workers = new PartitionedLeadership({
    name: 'pooler-retry',
    partitions: 2,
    clock,
    random: () => 0,
    healthIntervalMs: 200,
    queryTimeoutMs: 300,
    retryStrategy: new FixedInterval({ intervalMs: 250 }),
    connect: db.connect,
  });
  const errors: Error[] = [];
  workers.onError((e) => errors.push(e));
  return { clock, db, workers, errors };
}

/** The probe connections opened so far (each connect attempt opens one). */
const probes = (db: FakeDb): number =>
  db.clients.filter((c) => c.queries.some((q) => q.startsWith('/* pgleaderlock:probe'))).length;

describe('a pooler check that could not be completed at connect is retried, a definite refusal is not', () => {
  for (const probe of ['error', 'hang'] as const) {
    it(`(probe ${probe}) PartitionedLeadership: start() does not reject; the worker reports it and tries again on retryStrategy`, async () => {
      const { clock, db, workers, errors } = worker(probe);
      let rejected: unknown = null;
      void workers.start().catch((e: unknown) => {
        rejected = e;
      });
      await clock.advance(2000);
      await flush();
      expect(rejected).toBeNull();
      expect(errors.length).toBeGreaterThan(1);
      expect(errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
      expect(errors[0]?.message).toMatch(/could not be checked/);
      expect(isDefiniteRefusal(errors[0])).toBe(false);
      expect(probes(db)).toBeGreaterThan(2); // one per attempt, 250 ms apart
      await workers.shutdown();
    });
  }

  it('(probe finds another session’s marker) PartitionedLeadership: start() rejects with the definite refusal, no retry', async () => {
    const { clock, db, workers } = worker('marked');
    const started = workers.start().catch((e: unknown) => e);
    await clock.advance(2000);
    const err = await started;
    expect(err).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect(isDefiniteRefusal(err)).toBe(true);
    expect(probes(db)).toBe(1);
    await workers.shutdown();
  });

  it('(probe error) LeaderLock: reports it and tries again, the same; leads once the probe answers', async () => {
    const clock = new FakeClock();
    const db = new FakeDb(clock);
    db.sessionPooler = { probe: 'error' };
    const h = makeLock({ db, clock, retryStrategy: new FixedInterval({ intervalMs: 250 }) });
    await h.lock.start();
    await clock.advance(1000);
    expect(h.lock.isLeader).toBe(false);
    expect(h.errors.length).toBeGreaterThan(1);
    expect(h.errors[0]?.message).toMatch(/could not be checked/);
    expect(isDefiniteRefusal(h.errors[0])).toBe(false);
    db.sessionPooler.probe = 'normal';
    await clock.advance(300);
    expect(h.lock.isLeader).toBe(true);
    await h.lock.shutdown();
  });

  it('(probe finds another session’s marker) LeaderLock: reports the definite refusal once and stops, no retry', async () => {
    const clock = new FakeClock();
    const db = new FakeDb(clock);
    db.sessionPooler = { probe: 'marked' };
    const h = makeLock({ db, clock, retryStrategy: new FixedInterval({ intervalMs: 250 }) });
    let stopped = 0;
    h.lock.onStopped(() => {
      stopped += 1;
    });
    await h.lock.start();
    await clock.advance(2000);
    await flush();
    expect(h.errors).toHaveLength(1);
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect(isDefiniteRefusal(h.errors[0])).toBe(true);
    expect(h.lock.state).toBe('stopped');
    expect(stopped).toBe(1);
    expect(probes(db)).toBe(1);
    await h.lock.shutdown();
  });

  for (const acquireMode of ['poll', 'wait'] as const) {
    it(`(${acquireMode} mode) LeaderLock: a probe that passed at connect and a first acquisition refused on a backend without the session's marker: the definite refusal is reported once and the lock stops; a run that served first retries it; a new start() stops at it again`, async () => {
      const clock = new FakeClock();
      const db = new FakeDb(clock);
      db.sessionPooler = { probe: 'normal' };
      db.unmarkedAcquisitions = 1;
      const h = makeLock({ db, clock, acquireMode, retryStrategy: new FixedInterval({ intervalMs: 250 }) });
      // onStopped, as the harness records it
      const stopped = (): number => h.events.filter((e) => e === 'stopped').length;
      await h.lock.start();
      await clock.advance(2000);
      await flush();
      expect(h.errors.map((e) => e.message)).toEqual([expect.stringMatching(/without its marker/)]);
      expect(isDefiniteRefusal(h.errors[0])).toBe(true);
      expect(h.lock.state).toBe('stopped');
      expect(stopped()).toBe(1);
      expect(h.events).not.toContain('acquired');

      // served first (leading), then refused: retried like a failed connection (a pooler put in
      // front of a running election), the lock leads again once the path is good
      await h.lock.start();
      await flush();
      expect(h.lock.isLeader).toBe(true);
      await h.lock.stepDown();
      db.unmarkedAcquisitions = 1;
      await clock.advance(2000);
      await flush();
      expect(h.errors).toHaveLength(2);
      expect(h.lock.state).not.toBe('stopped');
      expect(h.lock.isLeader).toBe(true);
      await h.lock.shutdown();
      expect(stopped()).toBe(2);

      // a new run: refused at its first acquisition, it stops again
      db.unmarkedAcquisitions = 1;
      await h.lock.start();
      await clock.advance(2000);
      await flush();
      expect(h.errors).toHaveLength(3);
      expect(h.lock.state).toBe('stopped');
      expect(stopped()).toBe(3);
    });
  }
});

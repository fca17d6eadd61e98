/**
 * The peer watch's word on another primary (peers.ts), which a partition worker's takes
 * add their split-brain fence for (docs/partitions.md, "Primary failover"). A peer that
 * answered as a primary keeps that word through rounds it does not answer in (a probe past
 * its 250 ms deadline on a loaded machine): an old primary that was slow once is still up.
 * It loses it when it refuses connections or answers as a standby.
 */
import { EventEmitter } from 'node:events';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { Endpoint } from '../../src/core/endpoints.js';
import { PeerWatch } from '../../src/core/peers.js';
import { FakeClock, flush } from './fakes.js';

type Mode = 'primary' | 'standby' | 'silent' | 'refused';

/** A peer whose behaviour the test sets: answers, hangs, or refuses connections. */
function peer(label: string) {
  const state = { mode: 'primary' as Mode, connects: 0 };
  const client = () => {
    const c = new EventEmitter() as EventEmitter & Record<string, unknown>;
    c.connection = { stream: { destroy: () => {} } };
    c.end = () => Promise.resolve();
    c.query = () =>
      state.mode === 'silent'
        ? new Promise(() => {})
        : Promise.resolve({
            rows: [{ recovery: state.mode === 'standby', timeline: state.mode === 'standby' ? null : 1 }],
          });
    return c as unknown as pg.Client;
  };
  const endpoint: Endpoint = {
    label,
    connect: async () => {
      state.connects += 1;
      if (state.mode === 'refused')
        throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      return client();
    },
  };
  return { endpoint, state };
}

const INTERVAL = 500;

/** One round: the watch's timer fires, its probes answer or miss their 250 ms deadline. */
async function round(clock: FakeClock): Promise<void> {
  await clock.advance(INTERVAL);
  await flush();
}

describe('PeerWatch: the word on another primary', () => {
  it('a peer that answered as a primary keeps the word through rounds it misses; a refusal or a standby’s answer ends it', async () => {
    const clock = new FakeClock();
    const old = peer('old:5432');
    const promotions: Error[] = [];
    const watch = new PeerWatch(
      [old.endpoint],
      { label: 'new:5432', timeline: 2 },
      clock,
      (e) => promotions.push(e),
      INTERVAL,
    );
    expect(watch.otherPrimary).toBe(false);
    watch.start();
    await clock.advance(0);
    await flush();
    expect(watch.otherPrimary).toBe(true);

    old.state.mode = 'silent'; // the kept connection stops answering: the probe misses its deadline
    for (let i = 0; i < 4; i++) {
      await round(clock);
      await clock.advance(250);
      await flush();
      expect(watch.otherPrimary, `silent round ${i}`).toBe(true);
    }

    old.state.mode = 'refused'; // no server listens there any more
    await round(clock);
    await flush();
    expect(watch.otherPrimary).toBe(false);

    old.state.mode = 'primary'; // back, still an old primary
    await round(clock);
    expect(watch.otherPrimary).toBe(true);

    old.state.mode = 'standby';
    await round(clock);
    expect(watch.otherPrimary).toBe(false);
    expect(promotions).toEqual([]);
    watch.stop();
    expect(clock.pending).toBe(0);
  });

  it('starts from the survey’s word: a peer it found a primary keeps counting through 6 missed rounds; a silent peer it never heard from does not count, before or after its rounds', async () => {
    const clock = new FakeClock();
    const old = peer('old:5432');
    old.state.mode = 'silent';
    const watchOf = (primaries: Endpoint[]) =>
      new PeerWatch([old.endpoint], { label: 'new:5432', timeline: 2 }, clock, () => {}, INTERVAL, primaries);
    const surveyed = watchOf([old.endpoint]);
    const unheard = watchOf([]);
    expect([surveyed.otherPrimary, unheard.otherPrimary]).toEqual([true, false]);
    surveyed.start();
    unheard.start();
    for (let i = 0; i < 6; i++) {
      await clock.advance(i === 0 ? 0 : INTERVAL);
      await clock.advance(250);
      await flush();
      expect([surveyed.otherPrimary, unheard.otherPrimary], `missed round ${i}`).toEqual([true, false]);
    }
    surveyed.stop();
    unheard.stop();
    expect(clock.pending).toBe(0);
  });
});

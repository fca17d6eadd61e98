/**
 * Connection attempts to other hosts are abandoned when they are given up on, not left to
 * run until pg's own connect timeout: the survey's (primary.ts) and the takeover's peer
 * probe (peers.ts). Each endpoint records the signal it was given; the default `connect`
 * destroys its socket when that signal aborts (connect.ts).
 */
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { Endpoint } from '../../src/core/endpoints.js';
import { probePeers } from '../../src/core/peers.js';
import { findPrimary } from '../../src/core/primary.js';
import { FakeClient, FakeClock, FakeDb, flush } from './fakes.js';

/** An endpoint whose attempts never complete; the signals it was given. */
function silentEndpoint(label: string): { endpoint: Endpoint; signals: AbortSignal[] } {
  const signals: AbortSignal[] = [];
  const endpoint: Endpoint = {
    label,
    connect: (_name, signal) => {
      if (signal) signals.push(signal);
      return new Promise<pg.Client>(() => {});
    },
  };
  return { endpoint, signals };
}

describe('the survey gives up on a host: its attempt is aborted', () => {
  it('cut 250 ms after another host answered as the primary; the primary’s own connection is left alone', async () => {
    const clock = new FakeClock();
    const client = new FakeClient(new FakeDb(), 5);
    const primarySignals: AbortSignal[] = [];
    const primary: Endpoint = {
      label: 'primary:5432',
      connect: async (_name, signal) => {
        if (signal) primarySignals.push(signal);
        return client as unknown as pg.Client;
      },
    };
    const silent = silentEndpoint('silent:5432');
    const finding = findPrimary([primary, silent.endpoint], { clock, queryTimeoutMs: 5000 });
    await flush();
    expect(silent.signals[0]?.aborted).toBe(false);
    await clock.advance(249);
    expect(silent.signals[0]?.aborted).toBe(false);
    await clock.advance(1);
    expect(silent.signals[0]?.aborted).toBe(true);
    const found = await finding;
    expect(found.endpoint.label).toBe('primary:5432');
    expect(primarySignals[0]?.aborted).toBe(false);
    expect(client.ended).toBe(false);
  });

  it('at its deadline (queryTimeoutMs), and at once on a shutdown', async () => {
    const clock = new FakeClock();
    const late = silentEndpoint('late:5432');
    const timedOut = findPrimary([late.endpoint], { clock, queryTimeoutMs: 1000 }).catch((e: Error) => e);
    await clock.advance(999);
    expect(late.signals[0]?.aborted).toBe(false);
    await clock.advance(1);
    expect(late.signals[0]?.aborted).toBe(true);
    expect(await timedOut).toMatchObject({ code: 'ERR_PGLEADERLOCK_CONNECTION' });

    const stop = new AbortController();
    const stopped = silentEndpoint('stopped:5432');
    const abandoned = findPrimary([stopped.endpoint], {
      clock,
      queryTimeoutMs: 1000,
      signal: stop.signal,
    }).catch((e: Error) => e);
    await flush();
    stop.abort();
    expect(stopped.signals[0]?.aborted).toBe(true);
    expect(String(await abandoned)).toMatch(/abandoned: shutting down/);
  });
});

describe('the takeover’s peer probe: an attempt past its 250 ms deadline, or at a stop, is aborted', () => {
  it('at the deadline: the peer is unreachable and its attempt aborted', async () => {
    const clock = new FakeClock();
    const peer = silentEndpoint('peer:5432');
    const probing = probePeers([peer.endpoint], clock);
    await clock.advance(249);
    expect(peer.signals[0]?.aborted).toBe(false);
    await clock.advance(1);
    expect(await probing).toEqual([{ kind: 'unreachable' }]);
    expect(peer.signals[0]?.aborted).toBe(true);
  });

  it('at a stop: the round ends at once, no timer left', async () => {
    const clock = new FakeClock();
    const peer = silentEndpoint('peer:5432');
    const stop = new AbortController();
    const probing = probePeers([peer.endpoint], clock, stop.signal);
    await flush();
    stop.abort();
    expect(await probing).toEqual([{ kind: 'unreachable' }]);
    expect(peer.signals[0]?.aborted).toBe(true);
    expect(clock.pending).toBe(0);
  });
});

import { getEventListeners } from 'node:events';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { Connection } from '../../src/core/connection.js';
import { type Found, settingUp } from '../../src/core/primary.js';
import { FakeClient, FakeClock, FakeDb, flush } from './fakes.js';

describe('Connection.open given a signal (a shutdown)', () => {
  const options = { clock: new FakeClock(), queryTimeoutMs: 5000, closeTimeoutMs: 100, unref: false };

  it('an attempt under way is given up at once when it aborts, and the client it resolves later is closed', async () => {
    let resolveLate: (c: pg.Client) => void = () => {};
    const hook = () => new Promise<pg.Client>((resolve) => (resolveLate = resolve));
    const stop = new AbortController();
    const opening = Connection.open(hook, options, stop.signal);
    stop.abort();
    await expect(opening).rejects.toThrow(/connecting was abandoned: shutting down/);
    const late = new FakeClient(new FakeDb(), 7);
    resolveLate(late as unknown as pg.Client);
    await flush();
    expect(late.ended).toBe(true);
  });

  it('a signal aborted already: rejects without waiting for the hook', async () => {
    const stop = new AbortController();
    stop.abort();
    const never = () => new Promise<pg.Client>(() => {});
    await expect(Connection.open(never, options, stop.signal)).rejects.toThrow(/abandoned/);
  });
});

describe('settingUp (a session set up on the primary found)', () => {
  it('an abort during the set-up closes the found connection (its statements then fail at once), and no abort listener is left', async () => {
    const client = new FakeClient(new FakeDb(), 9);
    const found = {
      client,
      endpoint: { label: 'h:5432', connect: async () => client },
      timeline: 1,
      others: [],
    };
    const stop = new AbortController();
    let inSetUp: () => void = () => {};
    const entered = new Promise<void>((resolve) => (inSetUp = resolve));
    const setting = settingUp(found as unknown as Found, stop.signal, async (f) => {
      inSetUp();
      await new Promise<void>((_, reject) =>
        (f.client as unknown as FakeClient).once('end', () => reject(new Error('connection ended'))),
      );
    });
    await entered;
    expect(client.ended).toBe(false);
    stop.abort();
    await expect(setting).rejects.toThrow('connection ended');
    expect(client.ended).toBe(true);
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
  });

  it('a set-up that completes leaves the connection open and no abort listener', async () => {
    const client = new FakeClient(new FakeDb(), 10);
    const found = {
      client,
      endpoint: { label: 'h:5432', connect: async () => client },
      timeline: 1,
      others: [],
    };
    const stop = new AbortController();
    expect(await settingUp(found as unknown as Found, stop.signal, async () => 'ready')).toBe('ready');
    stop.abort();
    expect(client.ended).toBe(false);
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
  });
});

describe('a connect hook (one, or one per host)', () => {
  it("its client gets an 'error' listener until a session attaches: an error then (a FATAL while the survey waits for another host) crashes nothing", async () => {
    const { hookEndpoints } = await import('../../src/core/shared-options.js');
    const db = new FakeDb();
    const [a, b] = hookEndpoints([
      async () => new FakeClient(db, 1) as never,
      async () => new FakeClient(db, 2) as never,
    ]);
    expect([a?.label, b?.label]).toEqual(['connect[0]', 'connect[1]']);
    const client = (await a?.connect()) as unknown as FakeClient;
    expect(client.listenerCount('error')).toBe(1);
    expect(() =>
      client.emit('error', new Error('terminating connection due to administrator command')),
    ).not.toThrow();
  });
});

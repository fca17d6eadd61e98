/**
 * The pooler guard's probe connection (core/pooler.ts) when its session closes while the
 * probe is still connecting: the attempt is abandoned and a client that comes later is
 * closed, never kept (it would hold a connection, and the process, for ever).
 */
import { EventEmitter } from 'node:events';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PoolerGuard } from '../../src/core/pooler.js';
import { FakeClock, flush } from './fakes.js';

const SESSION_PID = 1;

/** A probe connection served by another backend, with nothing on it: a safe pooler. */
class ProbeClient extends EventEmitter {
  ended = false;
  readonly connection = { stream: { destroy: () => (this.ended = true) } };
  query(): Promise<{ rows: unknown[] }> {
    return Promise.resolve({ rows: [{ pid: 99, marker: null, held: false }] });
  }
  end(): Promise<void> {
    this.ended = true;
    return Promise.resolve();
  }
}

/** A guard over a session behind a pooler; `connect` answers the open-time probe at once, then as `later` says. */
async function guardWith(later: (signal: AbortSignal | undefined) => Promise<pg.Client>) {
  let calls = 0;
  const signals: (AbortSignal | undefined)[] = [];
  const guard = await PoolerGuard.open(
    {
      key1: 1,
      key2: 2,
      token: 'token',
      connect: (_name, signal) => {
        signals.push(signal);
        return calls++ === 0 ? Promise.resolve(new ProbeClient() as unknown as pg.Client) : later(signal);
      },
      session: () => Promise.resolve([{ pid: SESSION_PID, same: true, held: true }]),
      clock: new FakeClock(),
      timeoutMs: 5000,
    },
    SESSION_PID,
    SESSION_PID + 1, // the pid announced differs: a pooler is in the path
  );
  if (!guard) throw new Error('expected a guard: the announced pid differs');
  return { guard, signals };
}

describe('PoolerGuard: the session closes while the probe kept for leading is connecting', () => {
  it('a connect hook that ignores the signal: the check fails at once, not as a refusal, and the client it resolves later is closed', async () => {
    let resolveLate: (c: pg.Client) => void = () => {};
    const { guard } = await guardWith(() => new Promise<pg.Client>((resolve) => (resolveLate = resolve)));
    const checking = guard.verifyHolding();
    const outcome = checking.then(
      () => 'verified',
      (err: Error & { code?: string }) => err,
    );
    await flush();
    guard.close();
    const err = await outcome;
    expect(err).toBeInstanceOf(Error);
    expect(err).toMatchObject({
      code: 'ERR_PGLEADERLOCK_CONNECTION',
      message: 'the lock session was closed while the pooler probe ran',
    });
    const late = new ProbeClient();
    resolveLate(late as unknown as pg.Client);
    await flush();
    expect(late.ended).toBe(true);
  });

  it('the probe’s connect is given a signal that aborts when the guard closes (the default connect then destroys its socket)', async () => {
    const { guard, signals } = await guardWith(
      (signal) =>
        new Promise<pg.Client>((_, reject) =>
          signal?.addEventListener('abort', () => reject(new Error('socket destroyed')), { once: true }),
        ),
    );
    const checking = guard.verifyHolding().catch((err: Error) => err);
    await flush();
    expect(signals[1]?.aborted).toBe(false);
    guard.close();
    expect(signals[1]?.aborted).toBe(true);
    expect(await checking).toMatchObject({ code: 'ERR_PGLEADERLOCK_CONNECTION' });
  });

  it('(regression guard) a probe client that connected before the close is closed by it', async () => {
    const kept = new ProbeClient();
    const { guard } = await guardWith(() => Promise.resolve(kept as unknown as pg.Client));
    await guard.verifyHolding();
    expect(kept.ended).toBe(false);
    guard.close();
    expect(kept.ended).toBe(true);
  });
});

describe('PoolerGuard.open given a signal (a shutdown during the session set-up)', () => {
  it('the first probe is abandoned at once: a ConnectionError, not a refusal, and a client that comes later is closed', async () => {
    let resolveLate: (c: pg.Client) => void = () => {};
    const stop = new AbortController();
    const opening = PoolerGuard.open(
      {
        key1: 1,
        key2: 2,
        token: 'token',
        connect: () => new Promise<pg.Client>((resolve) => (resolveLate = resolve)),
        session: () => Promise.resolve([]),
        clock: new FakeClock(),
        timeoutMs: 5000,
      },
      SESSION_PID,
      SESSION_PID + 1,
      stop.signal,
    );
    const outcome = opening.then(
      () => 'opened',
      (err: Error) => err,
    );
    await flush();
    stop.abort();
    expect(await outcome).toMatchObject({ code: 'ERR_PGLEADERLOCK_CONNECTION' });
    const late = new ProbeClient();
    resolveLate(late as unknown as pg.Client);
    await flush();
    expect(late.ended).toBe(true);
  });
});

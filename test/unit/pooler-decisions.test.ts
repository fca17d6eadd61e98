/**
 * The pooler guard's decisions (core/pooler.ts), one row each: what a probe through the same
 * path and the session's next statement must show for the lock to go on, and which answers
 * refuse it (`ERR_PGLEADERLOCK_UNSAFE`), which are a lost connection, and which are an
 * undecided refusal (retried). The real poolers behind these rows are in
 * compat/pgbouncer*.test.ts; here each rule is shown on its own.
 */
import { EventEmitter, getEventListeners } from 'node:events';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { ConnectionError, isDefiniteRefusal } from '../../src/core/errors.js';
import { type PinnedRow, PoolerGuard, refuseSharedBackends } from '../../src/core/pooler.js';
import { FakeClock, flush } from './fakes.js';

const SESSION_PID = 10;
const TOKEN = 'token-of-this-session';

interface ProbeRow {
  pid: number;
  marker: string | null;
  held: boolean;
}

/** As the server does: a statement given another number of values than its parameters ($n) fails. */
function bind(text: string, values: unknown[]): void {
  const wanted = Math.max(0, ...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
  if (values.length !== wanted) {
    throw Object.assign(
      new Error(
        `bind message supplies ${values.length} parameters, but prepared statement requires ${wanted}`,
      ),
      { code: '08P01' },
    );
  }
}

class ProbeClient extends EventEmitter {
  ended = false;
  readonly connection = { stream: { destroy: () => (this.ended = true) } };
  constructor(private readonly answer: () => Promise<ProbeRow[]>) {
    super();
  }
  async query(text: string, values: unknown[] = []): Promise<{ rows: ProbeRow[] }> {
    bind(text, values);
    return { rows: await this.answer() };
  }
  end(): Promise<void> {
    this.ended = true;
    return Promise.resolve();
  }
}

const safeProbe: ProbeRow = { pid: 99, marker: null, held: false };
const pinned: PinnedRow = { pid: SESSION_PID, same: true, held: true };

/** A guard whose probes answer `probe` (the first, at open: `atOpen`) and whose session answers `session`. */
function options(o: {
  atOpen?: ProbeRow;
  probe?: () => Promise<ProbeRow[]>;
  session?: () => Promise<PinnedRow[]>;
  clock?: FakeClock;
}) {
  let calls = 0;
  return {
    key1: 1,
    key2: 2,
    token: TOKEN,
    connect: (_name?: string, _signal?: AbortSignal) => {
      // the first probe is the open-time one: clean unless `atOpen` says otherwise
      const answer =
        calls++ === 0
          ? () => Promise.resolve([o.atOpen ?? safeProbe])
          : (o.probe ?? (() => Promise.resolve([safeProbe])));
      return Promise.resolve(new ProbeClient(answer) as unknown as pg.Client);
    },
    session: o.session ?? (() => Promise.resolve([pinned])),
    clock: o.clock ?? new FakeClock(),
    timeoutMs: 1000,
  };
}

async function holding(o: Parameters<typeof options>[0]): Promise<unknown> {
  const guard = await PoolerGuard.open(options(o), SESSION_PID, SESSION_PID + 1);
  if (!guard) throw new Error('expected a guard');
  try {
    await guard.verifyHolding();
    return 'verified';
  } catch (err) {
    return err;
  } finally {
    guard.close();
  }
}

describe('PoolerGuard: which answers let the lock go on', () => {
  it('a direct connection (the announced pid is the backend pid): no guard, no probe', async () => {
    let connects = 0;
    const o = options({});
    const guard = await PoolerGuard.open(
      {
        ...o,
        connect: (name, signal) => {
          connects += 1;
          return o.connect(name, signal);
        },
      },
      SESSION_PID,
      SESSION_PID,
    );
    expect(guard).toBeNull();
    expect(connects).toBe(0);
  });

  it('a probe served by another clean backend, and the session still on its own: verified', async () => {
    expect(await holding({})).toBe('verified');
  });

  it.each([
    [
      'served by this session’s backend',
      { pid: SESSION_PID, marker: null, held: false },
      "served by this session's backend",
    ],
    [
      'carrying this session’s marker on another pid',
      { pid: 99, marker: TOKEN, held: false },
      "served by this session's backend",
    ],
    ['on a backend that holds the lock', { pid: 99, marker: null, held: true }, 'which holds the lock'],
    [
      'on a backend that carries another lock session’s state',
      { pid: 99, marker: 'another', held: false },
      "carries another lock session's state",
    ],
  ] as const)('a probe %s: refused (ERR_PGLEADERLOCK_UNSAFE, definite)', async (_, row, says) => {
    const err = await holding({ probe: () => Promise.resolve([row]) });
    expect(err).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect((err as Error).message).toContain(says);
    expect(isDefiniteRefusal(err)).toBe(true);
  });

  it('the same rows at open: refused before any lock is asked for', async () => {
    for (const row of [
      { pid: SESSION_PID, marker: null, held: false },
      { pid: 99, marker: null, held: true },
      { pid: 99, marker: 'another', held: false },
    ]) {
      await expect(
        PoolerGuard.open(options({ atOpen: row }), SESSION_PID, SESSION_PID + 1),
      ).rejects.toMatchObject({
        code: 'ERR_PGLEADERLOCK_UNSAFE',
      });
    }
    // a clean one opens a guard
    expect(
      await PoolerGuard.open(options({ atOpen: safeProbe }), SESSION_PID, SESSION_PID + 1),
    ).not.toBeNull();
  });

  it('the session’s next statement on another backend, or its backend without its marker: refused', async () => {
    const moved = await holding({ session: () => Promise.resolve([{ ...pinned, pid: SESSION_PID + 5 }]) });
    expect(moved).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect((moved as Error).message).toContain(`ran on backends ${SESSION_PID} and ${SESSION_PID + 5}`);
    const unmarked = await holding({ session: () => Promise.resolve([{ ...pinned, same: false }]) });
    expect(unmarked).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect((unmarked as Error).message).toContain("no longer carries this session's marker");
    const none = await holding({ session: () => Promise.resolve([]) });
    expect(none).toMatchObject({ message: 'the second statement of the lock session returned no row' });
  });

  it('a probe served by this session’s backend while this session is dead (a session pooler freed it): the session’s loss, not a refusal', async () => {
    let statements = 0;
    const lost = new ConnectionError('connection lost: Connection terminated');
    const err = await holding({
      probe: () => Promise.resolve([{ pid: SESSION_PID, marker: null, held: false }]),
      // the statement before the probe ran; the one after finds the session gone
      session: () => (statements++ === 0 ? Promise.resolve([pinned]) : Promise.reject(lost)),
    });
    expect(err).toBe(lost);
    expect(statements).toBe(2);
  });

  it('a probe that does not answer within timeoutMs, or fails: an undecided refusal (retried), never a pass', async () => {
    const clock = new FakeClock();
    const guard = await PoolerGuard.open(
      options({ clock, probe: () => new Promise(() => {}) }),
      SESSION_PID,
      SESSION_PID + 1,
    );
    if (!guard) throw new Error('expected a guard');
    const outcome = guard.verifyHolding().then(
      () => 'verified',
      (e: unknown) => e,
    );
    await flush();
    await clock.advance(999);
    await flush();
    let settled = false;
    void outcome.then(() => (settled = true));
    await flush();
    expect(settled).toBe(false);
    await clock.advance(1);
    const err = await outcome;
    expect(err).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect((err as Error).message).toContain('could not be checked: probe failed: no answer within 1000 ms');
    expect(isDefiniteRefusal(err)).toBe(false);
    guard.close();
    const failed = await holding({ probe: () => Promise.reject(new Error('boom')) });
    expect(failed).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect(isDefiniteRefusal(failed)).toBe(false);
    const empty = await holding({ probe: () => Promise.resolve([]) });
    expect((empty as Error).message).toContain('the probe returned no row');
  });
});

describe('refuseSharedBackends (a session that takes no lock: LeaderWatch, the CLI)', () => {
  it('a direct connection passes; a pooler whose probe lands on the session’s backend is refused', async () => {
    const query = () => Promise.resolve([{ pid: SESSION_PID, same: false, held: false }]);
    const base = options({});
    const common = { query, key1: 1, key2: 2, clock: new FakeClock(), timeoutMs: 1000 };
    await expect(
      refuseSharedBackends({ ...common, connect: base.connect, announcedPid: SESSION_PID }),
    ).resolves.toBeUndefined();
    const shared = options({ atOpen: { pid: SESSION_PID, marker: null, held: false } });
    await expect(
      refuseSharedBackends({ ...common, connect: shared.connect, announcedPid: SESSION_PID + 1 }),
    ).rejects.toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    const clean = options({ atOpen: safeProbe });
    await expect(
      refuseSharedBackends({ ...common, connect: clean.connect, announcedPid: SESSION_PID + 1 }),
    ).resolves.toBeUndefined();
  });
});

describe('the probe’s own connection and the caller’s shutdown signal', () => {
  const common = { key1: 1, key2: 2, clock: new FakeClock(), timeoutMs: 1000 };
  /** The session's own statement, bound as the server would. */
  const query = (rows: PinnedRow[]) => (text: string, values: unknown[]) => {
    bind(text, values);
    return Promise.resolve(rows);
  };
  const onSession = [{ pid: SESSION_PID, same: false, held: false }];

  it('a direct connection opens no second connection (refuseSharedBackends)', async () => {
    let connects = 0;
    const base = options({});
    await refuseSharedBackends({
      ...common,
      query: query(onSession),
      announcedPid: SESSION_PID,
      connect: (name, signal) => {
        connects += 1;
        return base.connect(name, signal);
      },
    });
    expect(connects).toBe(0);
  });

  it('refuseSharedBackends: a probe on the session’s backend is refused as that (not as a lost marker); a session that returns no row is an error', async () => {
    const shared = options({ atOpen: { pid: SESSION_PID, marker: null, held: false } });
    const err = await refuseSharedBackends({
      ...common,
      query: query(onSession),
      connect: shared.connect,
      announcedPid: SESSION_PID + 1,
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect((err as Error).message).toContain(
      `a second connection was served by this session's backend, pid ${SESSION_PID}`,
    );
    await expect(
      refuseSharedBackends({
        ...common,
        query: query([]),
        connect: shared.connect,
        announcedPid: SESSION_PID + 1,
      }),
    ).rejects.toThrow('the session returned no row for its backend pid');
  });

  it('a backend that carries another session’s state: the message names server_reset_query', async () => {
    const err = await holding({
      probe: () => Promise.resolve([{ pid: 99, marker: 'another', held: false }]),
    });
    expect((err as Error).message).toContain('does not reset them between clients (server_reset_query)');
  });

  it('no listener is left on the caller’s signal once the first probe is done, passed or refused', async () => {
    const live = new AbortController();
    const guard = await PoolerGuard.open(options({}), SESSION_PID, SESSION_PID + 1, live.signal);
    expect(guard).not.toBeNull();
    guard?.close();
    const shared = options({ atOpen: { pid: 99, marker: null, held: true } });
    await expect(
      refuseSharedBackends({
        ...common,
        query: query(onSession),
        connect: shared.connect,
        announcedPid: SESSION_PID + 1,
        signal: live.signal,
      }),
    ).rejects.toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect(getEventListeners(live.signal, 'abort')).toHaveLength(0);
  });

  it('a signal aborted already (a shutdown): a ConnectionError, no probe connection opened', async () => {
    let connects = 0;
    const base = options({});
    const connect = (name?: string, signal?: AbortSignal) => {
      connects += 1;
      return base.connect(name, signal);
    };
    const aborted = AbortSignal.abort();
    for (const attempt of [
      PoolerGuard.open({ ...base, connect }, SESSION_PID, SESSION_PID + 1, aborted),
      refuseSharedBackends({
        ...common,
        query: query(onSession),
        connect,
        announcedPid: SESSION_PID + 1,
        signal: aborted,
      }),
    ]) {
      const err = await attempt.catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectionError);
      expect(err).not.toHaveProperty('code', 'ERR_PGLEADERLOCK_UNSAFE');
    }
    expect(connects).toBe(0);
  });

  it('a probe connection that does not connect within timeoutMs, or throws at once: an undecided refusal, and the attempt is abandoned (its signal aborted)', async () => {
    const clock = new FakeClock();
    let given: AbortSignal | undefined;
    const outcome = refuseSharedBackends({
      ...common,
      clock,
      query: query(onSession),
      announcedPid: SESSION_PID + 1,
      connect: (_name, signal) => {
        given = signal;
        return new Promise<pg.Client>(() => {});
      },
    }).catch((e: unknown) => e);
    await flush();
    expect(given?.aborted).toBe(false);
    await clock.advance(1000);
    const err = await outcome;
    expect(err).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect((err as Error).message).toMatch(
      /^a connection pooler is in the path .*could not be checked: connecting the probe failed: no answer within 1000 ms/,
    );
    expect(isDefiniteRefusal(err)).toBe(false);
    expect(given?.aborted).toBe(true);
    const threw = await refuseSharedBackends({
      ...common,
      query: query(onSession),
      announcedPid: SESSION_PID + 1,
      connect: () => {
        throw new Error('no route');
      },
    }).catch((e: unknown) => e);
    expect(threw).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect((threw as Error).message).toContain('connecting the probe failed: no route');
    expect(isDefiniteRefusal(threw)).toBe(false);
  });

  it('the probe connection kept while leading: a network error on it between checks is handled; checks leave no listener behind on the signal it was opened with', async () => {
    const base = options({});
    const clients: EventEmitter[] = [];
    let given: AbortSignal | undefined;
    const guard = await PoolerGuard.open(
      {
        ...base,
        connect: async (name, signal) => {
          given = signal;
          const c = await base.connect(name, signal);
          clients.push(c as unknown as EventEmitter);
          return c;
        },
      },
      SESSION_PID,
      SESSION_PID + 1,
    );
    if (!guard) throw new Error('expected a guard');
    for (let i = 0; i < 12; i++) await guard.verifyHolding();
    expect(clients).toHaveLength(2); // the one at open, then one kept for every check
    const kept = clients[1] as EventEmitter;
    expect(() => kept.emit('error', new Error('read ECONNRESET'))).not.toThrow();
    expect(getEventListeners(given as AbortSignal, 'abort')).toHaveLength(0);
    guard.close();
  });
});

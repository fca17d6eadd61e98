/**
 * One test per row of the spec's transition table (§3.3) and per footnote, through the
 * public API with a fake connection (`connect`) and a manual clock. docs/state-machine.md
 * links each row here.
 */
import { describe, expect, it } from 'vitest';
import { FixedInterval, LockState } from '../../src/index.js';
import { flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

describe('transition table', () => {
  it('STOPPED --Start--> FOLLOWER: opens a connection and attempts at once', async () => {
    const h = makeLock();
    expect(h.lock.state).toBe(LockState.STOPPED);
    await h.lock.start();
    await flush();
    expect(h.events.slice(0, 2)).toEqual(['stopped->follower', 'follower->acquiring']);
    expect(h.db.clients).toHaveLength(1);
    await h.lock.shutdown();
  });

  it('FOLLOWER --AcquireAttempt--> ACQUIRING: runs pg_try_advisory_lock after the back-off', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 3000 }) });
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    h.take();
    await h.clock.advance(2999);
    expect(h.take()).toEqual([]);
    await h.clock.advance(1);
    expect(h.take()).toEqual(['follower->acquiring', 'acquiring->follower', 'acquireFailed']);
    expect(h.db.last.queries.filter((q) => q.includes('pg_try_advisory_lock'))).toHaveLength(2);
    await h.lock.shutdown();
  });

  it('FOLLOWER --StopRequested--> STOPPED: closes the connection, emits stopped', async () => {
    const h = makeLock();
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    h.take();
    await h.lock.shutdown();
    expect(h.take()).toEqual(['follower->stopped', 'stopped']);
    expect(h.db.open).toHaveLength(0);
  });

  it('ACQUIRING --AcquireSucceeded--> LEADER: emits acquired, resets retry, health loop runs', async () => {
    const attempts: number[] = [];
    const h = makeLock({
      retryStrategy: {
        nextDelayMs: (ctx) => {
          attempts.push(ctx.attempt);
          return 100;
        },
      },
    });
    h.db.takeByOther();
    await h.lock.start();
    await h.clock.advance(100); // two failed attempts: the strategy was asked for attempts 1 and 2
    expect(attempts).toEqual([1, 2]);
    h.db.holder = null;
    await h.clock.advance(100);
    expect(h.take().slice(-2)).toEqual(['acquiring->leader', 'acquired']);
    expect(h.lock.isLeader).toBe(true);
    await h.clock.advance(1000);
    expect(h.db.last.checks).toBe(1);
    await h.clock.advance(1000);
    expect(h.db.last.checks).toBe(2);
    await h.lock.stepDown(); // backs off: the first delay of a new cycle
    expect(attempts).toEqual([1, 2, 1]);
    await h.lock.shutdown();
  });

  it('ACQUIRING --AcquireFailed--> FOLLOWER: emits acquireFailed and backs off per the strategy', async () => {
    const delays: number[] = [];
    const h = makeLock({
      retryStrategy: {
        nextDelayMs: (ctx) => {
          delays.push(ctx.attempt);
          return 100 * ctx.attempt;
        },
      },
    });
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    expect(h.take()).toEqual([
      'stopped->follower',
      'follower->acquiring',
      'acquiring->follower',
      'acquireFailed',
    ]);
    await h.clock.advance(100);
    await h.clock.advance(200);
    expect(delays).toEqual([1, 2, 3]);
    expect(h.events.filter((e) => e === 'acquireFailed')).toHaveLength(3);
    await h.lock.shutdown();
  });

  it('ACQUIRING --DbError--> FOLLOWER: emits lost and error, closes the connection, reconnects', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 50 }) });
    h.db.behaviour.tryLock = 'error';
    await h.lock.start();
    await flush();
    expect(h.take()).toEqual([
      'stopped->follower',
      'follower->acquiring',
      'acquiring->follower',
      'lost',
      'error:LockError',
    ]);
    expect(h.errors[0]?.cause).toMatchObject({ code: 'XX000' });
    expect(h.db.clients[0]?.ended).toBe(true);
    h.db.behaviour.tryLock = 'normal';
    await h.clock.advance(50);
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(h.db.clients).toHaveLength(2);
    await h.lock.shutdown();
  });

  it('ACQUIRING --DbError--> STOPPED with autoReacquire off (footnote 1)', async () => {
    const h = makeLock({ autoReacquire: false });
    h.db.behaviour.tryLock = 'error';
    await h.lock.start();
    await flush();
    expect(h.take()).toEqual([
      'stopped->follower',
      'follower->acquiring',
      'acquiring->stopped',
      'lost',
      'error:LockError',
      'stopped',
    ]);
    expect(h.db.open).toHaveLength(0);
  });

  it('ACQUIRING --StopRequested--> STOPPED: closes the connection (a granted lock goes with it)', async () => {
    const h = makeLock();
    h.db.behaviour.tryLock = 'hang';
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.ACQUIRING);
    const done = h.lock.shutdown();
    await h.clock.advance(500); // the hung try-lock hits its deadline
    await done;
    expect(h.events).toContain('acquiring->stopped');
    expect(h.events.at(-1)).toBe('stopped');
    expect(h.db.open).toHaveLength(0);
    expect(h.db.holder).toBeNull();
  });

  it('LEADER --HealthOk--> LEADER: no transition, no event', async () => {
    const h = makeLock();
    await startLeader(h);
    await h.clock.advance(5000);
    expect(h.take()).toEqual([]);
    expect(h.lock.isLeader).toBe(true);
    await h.lock.shutdown();
  });

  it('LEADER --HealthFailed--> RECONNECTING with a grace period: warns, closes, isLeader false', async () => {
    const h = makeLock({ reconnectGraceMs: 3000, retryStrategy: new FixedInterval({ intervalMs: 500 }) });
    await startLeader(h);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    expect(h.take()).toEqual(['leader->reconnecting']);
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    expect(h.lock.isLeader).toBe(false);
    await h.lock.shutdown();
  });

  it('LEADER --DbError--> RECONNECTING: a health query that errors', async () => {
    const h = makeLock({ reconnectGraceMs: 3000 });
    await startLeader(h);
    h.db.behaviour.check = 'error';
    await h.clock.advance(1000);
    expect(h.take()[0]).toBe('leader->reconnecting');
    await h.lock.shutdown();
  });

  it('LEADER --HealthFailed--> FOLLOWER with onLost when there is no grace (footnote 3)', async () => {
    const h = makeLock();
    await startLeader(h);
    h.db.last.kill();
    await flush();
    expect(h.take().slice(0, 2)).toEqual(['leader->follower', 'lost']);
    // immediate re-attempt on a new connection wins the now-free lock
    expect(h.lock.state).toBe(LockState.LEADER);
    await h.lock.shutdown();
  });

  it('LEADER --HealthFailed--> STOPPED with no grace and autoReacquire off (footnotes 3 and 1)', async () => {
    const h = makeLock({ autoReacquire: false });
    await startLeader(h);
    h.db.last.kill();
    await flush();
    expect(h.take()).toEqual(['leader->stopped', 'lost', 'stopped']);
    expect(h.db.open).toHaveLength(0);
  });

  it('LEADER --StopRequested--> RELEASING: unlocks, then STOPPED with released', async () => {
    const h = makeLock();
    await startLeader(h);
    const client = h.db.last;
    await h.lock.shutdown();
    expect(h.take()).toEqual(['leader->releasing', 'releasing->stopped', 'released', 'stopped']);
    expect(client.queries.some((q) => q.includes('pg_advisory_unlock'))).toBe(true);
    expect(h.db.open).toHaveLength(0);
  });

  it('LEADER --ReleaseRequested--> RELEASING: stepDown unlocks', async () => {
    const h = makeLock({ autoReacquire: false });
    await startLeader(h);
    await h.lock.stepDown();
    expect(h.take()).toEqual(['leader->releasing', 'releasing->stopped', 'released', 'stopped']);
  });

  it('RECONNECTING --ReacquireSucceeded--> LEADER: no lost, no acquired', async () => {
    const h = makeLock({ reconnectGraceMs: 3000, retryStrategy: new FixedInterval({ intervalMs: 500 }) });
    await startLeader(h);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    await h.clock.advance(500);
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    h.db.connectBehaviour = 'normal';
    await h.clock.advance(500);
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->leader']);
    await h.lock.shutdown();
  });

  it('RECONNECTING --ReacquireFailed--> FOLLOWER: another session holds the lock', async () => {
    const h = makeLock({ reconnectGraceMs: 3000 });
    await startLeader(h);
    h.db.last.kill();
    h.db.takeByOther();
    await flush();
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->follower', 'lost']);
    await h.lock.shutdown();
  });

  it('RECONNECTING --ReacquireFailed--> STOPPED with autoReacquire off (footnote 1)', async () => {
    const h = makeLock({ reconnectGraceMs: 3000, autoReacquire: false });
    await startLeader(h);
    h.db.last.kill();
    h.db.takeByOther();
    await flush();
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->stopped', 'lost', 'stopped']);
    expect(h.db.open).toHaveLength(0);
  });

  it('RECONNECTING --GraceExpired--> FOLLOWER: emits lost when the grace period ends', async () => {
    const h = makeLock({ reconnectGraceMs: 2000, retryStrategy: new FixedInterval({ intervalMs: 300 }) });
    await startLeader(h);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    await h.clock.advance(1999);
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    expect(h.events).not.toContain('lost');
    await h.clock.advance(1);
    // the server is still unreachable, so the immediate re-attempt fails to connect
    expect(h.take()).toEqual([
      'leader->reconnecting',
      'reconnecting->follower',
      'lost',
      'follower->acquiring',
      'acquiring->follower',
      'error:ConnectionError',
    ]);
    await h.lock.shutdown();
  });

  it('RECONNECTING --GraceExpired--> STOPPED with autoReacquire off (footnote 1)', async () => {
    const h = makeLock({ reconnectGraceMs: 1000, autoReacquire: false });
    await startLeader(h);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    await h.clock.advance(1000);
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->stopped', 'lost', 'stopped']);
  });

  it('RECONNECTING --StopRequested--> STOPPED: closes, emits stopped, never lost', async () => {
    const h = makeLock({ reconnectGraceMs: 3000 });
    await startLeader(h);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    await h.lock.shutdown();
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->stopped', 'stopped']);
    expect(h.db.open).toHaveLength(0);
  });

  it('RELEASING --ReleaseSucceeded--> STOPPED on shutdown', async () => {
    const h = makeLock();
    await startLeader(h);
    await h.lock.shutdown();
    expect(h.take()).toEqual(['leader->releasing', 'releasing->stopped', 'released', 'stopped']);
    expect(h.db.holder).toBeNull();
  });

  it('RELEASING --ReleaseSucceeded--> FOLLOWER after stepDown with autoReacquire (footnote 2)', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 1000 }) });
    await startLeader(h);
    await h.lock.stepDown();
    expect(h.take()).toEqual(['leader->releasing', 'releasing->follower', 'released']);
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    expect(h.db.holder).toBeNull();
    // it tries again after one back-off delay
    await h.clock.advance(1000);
    expect(h.lock.state).toBe(LockState.LEADER);
    await h.lock.shutdown();
  });

  it('RELEASING --ReleaseFailed--> STOPPED: unlock returned false, emits error', async () => {
    const h = makeLock();
    await startLeader(h);
    h.db.holder = null; // the lock vanished from the session without the client knowing
    await h.lock.shutdown();
    expect(h.take()).toEqual(['leader->releasing', 'releasing->stopped', 'error:LockError', 'stopped']);
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_RELEASE' });
    expect(h.db.open).toHaveLength(0);
  });

  it('RELEASING --DbError--> STOPPED: the unlock of a shutdown fails, emits error, connection closed', async () => {
    const h = makeLock();
    await startLeader(h);
    h.db.behaviour.unlock = 'error';
    await h.lock.shutdown();
    expect(h.take()).toEqual(['leader->releasing', 'releasing->stopped', 'error:LockError', 'stopped']);
    expect(h.db.open).toHaveLength(0);
    expect(h.db.holder).toBeNull();
  });

  it('RELEASING --DbError--> FOLLOWER (footnote ²): the unlock of a stepDown fails: emits error, connection closed, and the lock stays a candidate (autoReacquire), leading again after one back-off delay', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 200 }) });
    await startLeader(h);
    h.db.behaviour.unlock = 'error';
    await h.lock.stepDown();
    expect(h.take()).toEqual(['leader->releasing', 'releasing->follower', 'error:LockError']);
    expect(h.db.open).toHaveLength(0);
    expect(h.db.holder).toBeNull();
    h.db.behaviour.unlock = 'normal';
    await h.clock.advance(200);
    expect(h.lock.state).toBe(LockState.LEADER);
    await h.lock.shutdown();
  });

  it('RELEASING --DbError--> STOPPED without autoReacquire, after a stepDown too', async () => {
    const h = makeLock({ autoReacquire: false });
    await startLeader(h);
    h.db.behaviour.unlock = 'error';
    await h.lock.stepDown();
    expect(h.take()).toEqual(['leader->releasing', 'releasing->stopped', 'error:LockError', 'stopped']);
  });
});

describe('rows the spec implies', () => {
  it('ACQUIRING --ConnectFailed--> FOLLOWER: connection failures are retried with the strategy, no lost', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 200 }) });
    h.db.connectBehaviour = 'error';
    await h.lock.start();
    await flush();
    expect(h.take()).toEqual([
      'stopped->follower',
      'follower->acquiring',
      'acquiring->follower',
      'error:ConnectionError',
    ]);
    expect(h.errors[0]?.cause).toMatchObject({ code: 'ECONNREFUSED' });
    h.db.connectBehaviour = 'normal';
    await h.clock.advance(200);
    expect(h.lock.state).toBe(LockState.LEADER);
    await h.lock.shutdown();
  });

  it('FOLLOWER --RetryExhausted--> STOPPED: a strategy returning null gives up', async () => {
    const h = makeLock({ retryStrategy: { nextDelayMs: (ctx) => (ctx.attempt < 3 ? 10 : null) } });
    h.db.takeByOther();
    await h.lock.start();
    await h.clock.advance(100);
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.events.filter((e) => e === 'acquireFailed')).toHaveLength(3);
    expect(h.events.slice(-3)).toEqual(['follower->stopped', 'error:LockError', 'stopped']);
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_RETRY_EXHAUSTED' });
    expect(h.db.open).toHaveLength(0);
  });

  it('never calls pg_try_advisory_lock while leader', async () => {
    const h = makeLock();
    await startLeader(h);
    await h.clock.advance(10_000);
    expect(h.db.last.queries.filter((q) => q.includes('pg_try_advisory_lock'))).toHaveLength(1);
    await h.lock.shutdown();
  });

  it('silent loss: the health check finds the lock gone on a live session', async () => {
    const h = makeLock();
    await startLeader(h);
    h.db.silentLoss = true;
    await h.clock.advance(1000);
    expect(h.take().slice(0, 2)).toEqual(['leader->follower', 'lost']);
    expect(h.errors.some((e) => 'code' in e && e.code === 'ERR_PGLEADERLOCK_LOST')).toBe(false); // lost is not an error
    h.db.silentLoss = false;
    await h.lock.shutdown();
  });

  it('a health query that hangs is cut at queryTimeoutMs and the client destroyed', async () => {
    const h = makeLock({ queryTimeoutMs: 300 });
    await startLeader(h);
    const client = h.db.last;
    h.db.behaviour.check = 'hang';
    await h.clock.advance(1000);
    expect(h.lock.state).toBe(LockState.LEADER);
    await h.clock.advance(300);
    expect(client.ended).toBe(true);
    expect(h.events).toContain('lost');
    h.db.behaviour.check = 'normal';
    await h.lock.shutdown();
  });
});

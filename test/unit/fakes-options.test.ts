/**
 * docs/testing-your-code.md, "One options object for both": the fakes accept every option
 * of the class they stand for, validated by that class's own rules; those they cannot use
 * are ignored.
 */
import { describe, expect, it } from 'vitest';
import {
  FixedInterval,
  LeaderLock,
  type LeaderLockOptions,
  PartitionedLeadership,
  type PartitionedLeadershipOptions,
} from '../../src/index.js';
import { FakeLeaderLock, FakePartitionedLeadership } from '../../src/testing/index.js';

const url = 'postgres://app@127.0.0.1:1/app'; // never connected

/** The error `make` throws, or null. */
function thrown(make: () => unknown): Error | null {
  try {
    make();
    return null;
  } catch (err) {
    return err as Error;
  }
}

describe('FakeLeaderLock takes LeaderLock options', () => {
  const options: LeaderLockOptions = {
    connectionString: url,
    name: 'billing',
    id: 'worker-1',
    acquireMode: 'poll',
    healthIntervalMs: 1000,
    queryTimeoutMs: 800,
    retryStrategy: new FixedInterval({ intervalMs: 100 }),
    reconnectGraceMs: 2000,
    takeoverDelayMs: 0,
    fencing: true,
    autoReacquire: false,
    callbackTimeoutMs: 5000,
  };

  it('one options object builds both; the fake uses id and name', () => {
    const real = new LeaderLock(options);
    const fake = new FakeLeaderLock(options);
    expect([fake.id, fake.name]).toEqual([real.id, real.name]);
    expect(fake.name).toBe('billing');
  });

  it.each([
    ['healthIntervalMs', { healthIntervalMs: -5 }],
    ['acquireMode', { acquireMode: 'sometimes' }],
    ['retryStrategy', { retryStrategy: { next: () => 1 } }],
    ['key1 and name', { key1: 1, key2: 2 }],
    ['a misspelt option', { healthIntervalMS: 100 }],
  ])('%s: the fake refuses what the real class refuses, with the same error', (_what, bad) => {
    const o = { ...options, ...bad } as LeaderLockOptions;
    const real = thrown(() => new LeaderLock(o));
    const fake = thrown(() => new FakeLeaderLock(o));
    expect(real).not.toBeNull();
    expect(fake?.constructor).toBe(real?.constructor);
    expect(fake?.message).toBe(
      real?.message.replace('unknown LeaderLock option', 'unknown FakeLeaderLock option'),
    );
  });

  it('without any real-only option, no connection is asked for (the fake alone)', () => {
    expect(new FakeLeaderLock({ id: 'x' }).name).toBeNull();
  });
});

describe('FakePartitionedLeadership takes PartitionedLeadership options', () => {
  const options: PartitionedLeadershipOptions = {
    connectionString: url,
    name: 'readers',
    partitions: 8,
    id: 'w1',
    watchSliceMs: 5000,
    healthIntervalMs: 1000,
    fencing: true,
    random: () => 0.5,
    drainTimeoutMs: 2000,
  };

  it('one options object builds both', () => {
    const real = new PartitionedLeadership(options);
    const fake = new FakePartitionedLeadership(options);
    expect([fake.id, fake.name]).toEqual([real.id, real.name]);
  });

  it.each([
    ['watchSliceMs', { watchSliceMs: 0 }],
    ['random', { random: 3 }],
    ['a misspelt option', { watchSliceMS: 100 }],
  ])('%s: the fake refuses what the real class refuses, with the same error', (_what, bad) => {
    const o = { ...options, ...bad } as PartitionedLeadershipOptions;
    const real = thrown(() => new PartitionedLeadership(o));
    const fake = thrown(() => new FakePartitionedLeadership(o));
    expect(real).not.toBeNull();
    expect(fake?.constructor).toBe(real?.constructor);
    expect(fake?.message).toBe(
      real?.message.replace(
        'unknown PartitionedLeadership option',
        'unknown FakePartitionedLeadership option',
      ),
    );
  });
});

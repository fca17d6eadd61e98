import { FakeLeaderLock } from 'pgleaderlock/testing';
import { describe, expect, it, vi } from 'vitest';
import { type OutboxPorts, runOutbox } from './outbox.js';

/** An outbox in memory. With `slow`, a send lasts until its signal aborts (a broker that hangs). */
function memoryOutbox() {
  const pending: string[] = [];
  const box = {
    sent: [] as string[],
    /** Sends that returned because leadership ended. */
    cut: [] as string[],
    inFlight: null as string | null,
    slow: false,
    add(message: string) {
      pending.push(message);
      wake();
    },
  };
  let wake = () => {};
  const ports: OutboxPorts = {
    next: async () => pending.shift() ?? null,
    async send(message, signal) {
      box.inFlight = message;
      if (box.slow) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      box.inFlight = null;
      if (signal.aborted) box.cut.push(message);
      else box.sent.push(message);
    },
    idle: (signal) =>
      new Promise((resolve) => {
        wake = () => resolve();
        signal.addEventListener('abort', () => resolve(), { once: true });
      }),
  };
  return { box, ports };
}

describe('runOutbox', () => {
  it('sends nothing while another replica leads', async () => {
    const lock = new FakeLeaderLock();
    const { box, ports } = memoryOutbox();
    const outbox = runOutbox(lock, ports);
    await lock.start();
    box.add('a');
    await lock.newLeader('replica-2');
    expect(box.sent).toEqual([]);
    expect(outbox.leader()).toBe('replica-2');
  });

  it('sends in order once elected, and knows that it leads', async () => {
    const lock = new FakeLeaderLock();
    const { box, ports } = memoryOutbox();
    const outbox = runOutbox(lock, ports);
    await lock.start();
    box.add('a');
    box.add('b');
    await lock.elect();
    expect(outbox.leader()).toBe(lock.id);
    await vi.waitFor(() => expect(box.sent).toEqual(['a', 'b']));
    box.add('c');
    await vi.waitFor(() => expect(box.sent).toEqual(['a', 'b', 'c']));
  });

  it('a loss cuts the send in flight short, and nothing more is sent', async () => {
    const lock = new FakeLeaderLock();
    const { box, ports } = memoryOutbox();
    const outbox = runOutbox(lock, ports);
    box.slow = true;
    await lock.start();
    await lock.elect();
    box.add('a');
    await vi.waitFor(() => expect(box.inFlight).toBe('a'));
    await lock.lose(new Error('connection reset'));
    await vi.waitFor(() => expect(box.cut).toEqual(['a']));
    expect(outbox.leader()).toBeNull();
    box.slow = false;
    box.add('b');
    await lock.newLeader('replica-2');
    expect(box.sent).toEqual([]);
  });

  it('shutdown() returns only once the send in flight has stopped', async () => {
    const lock = new FakeLeaderLock();
    const { box, ports } = memoryOutbox();
    runOutbox(lock, ports);
    box.slow = true;
    await lock.start();
    await lock.elect();
    box.add('a');
    await vi.waitFor(() => expect(box.inFlight).toBe('a'));
    await lock.shutdown();
    expect(box.cut).toEqual(['a']);
  });
});

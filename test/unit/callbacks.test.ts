/** The callback queue's deadline and what health() reads from it (`Callbacks.hung()`). */
import { describe, expect, it } from 'vitest';
import { Callbacks } from '../../src/core/callbacks.js';
import { FakeClock, flush } from './fakes.js';

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
type Map = { ping: () => void; error: (e: Error) => void };

describe('Callbacks: a callback past its deadline', () => {
  it('is hung for health() from the moment its timeout is reported, not a millisecond later (the report and hung() agree)', async () => {
    const clock = new FakeClock();
    const callbacks = new Callbacks<Map>(quiet, clock, 300);
    const seenAtReport: (ReturnType<typeof callbacks.hung> | undefined)[] = [];
    callbacks.add('error', () => {
      seenAtReport.push(callbacks.hung());
    });
    callbacks.add('ping', () => new Promise<void>(() => {})); // never settles
    callbacks.emit('ping');
    await flush();
    await clock.advance(299);
    expect(callbacks.hung()).toBeNull();
    await clock.advance(1); // the deadline: the timeout is reported now
    await flush();
    expect(seenAtReport).toHaveLength(1);
    expect(seenAtReport[0]).toMatchObject({ event: 'ping', ms: 300 });
    expect(callbacks.hung()).toMatchObject({ event: 'ping' });
  });
});

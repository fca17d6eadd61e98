/**
 * A health check answered just before the session died: the answer and the FATAL arrive in
 * one packet (a server's fast shutdown right after it answered), and pg emits the connection's
 * `'error'` while parsing, before the check's promise continues. The death ends the term at
 * once; the check's answer must not open another term on the dead session (seen through a
 * proxy in test/compat/endpoint-retarget.test.ts: a 0.5 ms term, leader work started and
 * aborted, after the old primary's stop).
 */
import type pg from 'pg';
import { expect, it } from 'vitest';
import { flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

it('a check answered in the same turn as the session died opens no new term: leader work runs once, then lost', async () => {
  let armed = false;
  const h = makeLock({
    autoReacquire: false, // no new grant afterwards: every term counted is of the first leadership
    connect: async (): Promise<pg.Client> => {
      const client = await h.db.connect();
      const fake = client as unknown as { query: typeof client.query; kill(): void };
      const query = fake.query.bind(client) as (text: string, values?: unknown[]) => Promise<unknown>;
      (fake as { query: unknown }).query = (text: string, values?: unknown[]) => {
        const answered = query(text, values);
        if (armed && text.includes('pgleaderlock:check')) {
          armed = false;
          fake.kill(); // the FATAL parsed right after the answer: 'error' before the promise continues
        }
        return answered;
      };
      return client;
    },
  });
  let terms = 0;
  h.lock.runWhileLeader(async (term) => {
    terms += 1;
    await new Promise((resolve) => term.signal.addEventListener('abort', resolve, { once: true }));
  });
  await startLeader(h);
  expect(terms).toBe(1);
  armed = true;
  await h.clock.advance(1000); // the next health check
  await flush();
  expect(armed).toBe(false); // the check ran
  expect(terms).toBe(1);
  expect(h.take().filter((e) => e === 'acquired' || e === 'lost')).toEqual(['lost']);
  expect(h.lock.state).toBe('stopped');
  await h.lock.shutdown();
});

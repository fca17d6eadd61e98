/**
 * docs/observability.md, "Logging with pino": every error is logged with an `err` field
 * holding the Error itself, so pino's serializers (and every log pipeline after them) keep
 * its type, message, stack, code and cause. A real pino logger, writing JSON lines to a
 * stream this test reads, against the real server.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { LeaderLock } from '../../src/index.js';
import { adminQuery, databaseUrl, eventually, randomKeys } from '../harness/db.js';

interface Line {
  level: number;
  event?: string;
  msg?: string;
  err?: { type: string; message: string; stack: string; code?: string };
  [field: string]: unknown;
}

function pinoLines(): { logger: pino.Logger; lines: Line[] } {
  const lines: Line[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString().split('\n')) if (text) lines.push(JSON.parse(text) as Line);
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), lines };
}

describe('errors are logged as `err`, in the shape pino serializes', () => {
  it('a wrong password: an `error` line whose err has the type, code, message, stack and the driver error as its cause (28P01)', async () => {
    const { logger, lines } = pinoLines();
    const u = new URL(databaseUrl());
    u.password = 'wrong';
    const lock = new LeaderLock({ connectionString: u.toString(), ...randomKeys(), logger });
    await lock.start();
    await eventually(() => lines.some((l) => l.event === 'error'), { what: 'an error line' });
    await lock.shutdown();
    const line = lines.find((l) => l.event === 'error') as Line;
    expect(line.level).toBe(50);
    expect(line.code).toBe('ERR_PGLEADERLOCK_CONNECTION');
    expect(line.err).toMatchObject({ type: 'ConnectionError', code: 'ERR_PGLEADERLOCK_CONNECTION' });
    expect(line.err?.message).toMatch(/password authentication failed/);
    // the stack: ours, then pino's "caused by:" with the driver's error (pg names it `error`)
    expect(line.err?.stack).toMatch(/^ConnectionError: /);
    expect(line.err?.stack).toMatch(/\n {4}at .+\n/);
    expect(line.err?.stack).toMatch(/\ncaused by: error: password authentication failed for user/);
    expect(JSON.stringify(lines)).not.toContain('wrong@');
  });

  it('a terminated backend: lock_lost (warn) carries err with its cause; a callback that throws: callback_failed carries the CallbackError caused by what it threw', async () => {
    const { logger, lines } = pinoLines();
    const lock = new LeaderLock({
      connectionString: databaseUrl(),
      ...randomKeys(),
      logger,
      takeoverDelayMs: 0,
    });
    lock.onAcquired(() => {
      throw new Error('boom in onAcquired');
    });
    lock.onError(() => {});
    await lock.start();
    expect(await lock.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    await eventually(() => lines.some((l) => l.event === 'callback_failed'), { what: 'callback_failed' });
    const failed = lines.find((l) => l.event === 'callback_failed') as Line;
    expect(failed.err).toMatchObject({ type: 'CallbackError', code: 'ERR_PGLEADERLOCK_CALLBACK' });
    expect(failed.err?.stack).toMatch(/^CallbackError: acquired callback failed: boom in onAcquired/);
    expect(failed.err?.stack).toMatch(/\ncaused by: Error: boom in onAcquired\n {4}at /);

    await adminQuery(
      databaseUrl(),
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
      [`pgleaderlock:${lock.id}`],
    );
    await eventually(() => lines.some((l) => l.event === 'lock_lost'), { what: 'lock_lost' });
    await lock.shutdown();
    const lost = lines.find((l) => l.event === 'lock_lost') as Line;
    expect(lost.level).toBe(40);
    expect(lost.err).toMatchObject({ type: 'LockError', code: 'ERR_PGLEADERLOCK_LOST' });
    expect(lost.err?.stack).toMatch(/^LockError: /);
    expect(lost.err?.stack).toMatch(/\ncaused by: /);
  });
});

/** `pgleaderlock status` during a takeover delay (docs/safety.md, "Takeover delay"), from dist/cli.js. */
import { describe, expect, it } from 'vitest';
import { cli } from '../harness/cli.js';
import { databaseUrl, eventually, randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();

describe('pgleaderlock status and a pending holder', () => {
  it('shows the holder as pending while its takeover delay runs (text and --json)', async () => {
    const keys = randomKeys();
    const keyArgs = ['--key1', String(keys.key1), '--key2', String(keys.key2)];
    // the first holder has no proof of a clean handover: its term opens after the delay (long
    // enough for two CLI runs on a loaded machine; the lock is shut down before it ends)
    const lock = locks.make({ ...keys, takeoverDelayMs: 20_000 });
    await lock.start();
    await eventually(() => lock.state === 'pending', { what: 'the lock to hold, pending' });

    const [json, text] = await Promise.all([
      cli(['status', '--dsn', databaseUrl(), ...keyArgs, '--json']),
      cli(['status', '--dsn', databaseUrl(), ...keyArgs]),
    ]);
    expect(lock.state).toBe('pending');
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ pending: true, leader: { id: lock.id } });
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(
      new RegExp(
        `^pending: ${lock.id} \\(pid \\d+.*\\(holds the lock; its term opens after the takeover delay\\)$`,
        'm',
      ),
    );
  });
});

/**
 * README ("Defaults: takeover within about 20 s") and docs/safety.md ("a dead leader is
 * replaced within about 20 s"): a leader frozen with every timing at its default. The
 * server frees its lock only once its session has been idle for `serverReleaseMs`
 * (20 s: `idle_session_timeout`, armed with the grant; a frozen process's kernel still
 * answers TCP keepalives), counted from the frozen leader's last check, which was sent at
 * most one health interval (5 s) before the freeze. The follower, waiting in wait mode, is
 * granted at once, and then holds the lock for the takeover delay (250 ms): a frozen
 * leader sends no proof of drain.
 */
import { fork } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { LeaderLock } from '../../src/index.js';
import { useChildren } from '../harness/children.js';
import { databaseUrl, eventually, lockHolders, randomKeys, testTag } from '../harness/db.js';

const FIXTURE = path.join(import.meta.dirname, '../fixtures/takeover-delay-candidate.fixture.ts');
const track = useChildren();

describe('a frozen leader, every timing at its default (wait mode)', () => {
  it('is replaced within 20 s of the freeze plus the 250 ms takeover delay (< 20,250 + 250 ms), and not before 15 s + 250 ms (its last check was sent at most one 5 s health interval before the freeze)', async () => {
    const keys = randomKeys();
    const tag = testTag();
    const reports: { ev: string; at: number }[] = [];
    const child = track(
      fork(
        FIXTURE,
        [
          JSON.stringify({
            url: databaseUrl(),
            ...keys,
            id: `${tag}-frozen`,
            acquireMode: 'wait',
            takeoverDelayMs: 250,
            stopMs: 0,
            autoReacquire: false,
            defaults: true,
          }),
        ],
        { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
      ),
    );
    child.on('message', (m: { ev: string; at: number }) => reports.push(m));
    onTestFinished(() => {
      child.kill('SIGKILL'); // frozen: it cannot shut down
    });
    await eventually(() => reports.some((r) => r.ev === 'run-start'), {
      timeoutMs: 30_000,
      what: 'the child leading',
    });
    const follower = new LeaderLock({ connectionString: databaseUrl(), ...keys, id: `${tag}-follower` });
    onTestFinished(() => follower.shutdown({ timeoutMs: 5000 }));
    let ledAt = 0;
    follower.onAcquired(() => {
      ledAt = performance.now();
    });
    await follower.start();
    await eventually(
      async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).some((h) => !h.granted),
      {
        what: 'the follower queued',
      },
    );
    child.kill('SIGSTOP');
    const frozenAt = performance.now();
    await eventually(() => ledAt > 0, { timeoutMs: 25_000, intervalMs: 20, what: 'the follower leading' });
    const replacedAfter = ledAt - frozenAt;
    console.log(`[frozen default] replaced ${replacedAfter.toFixed(0)} ms after the freeze`);
    expect(replacedAfter).toBeGreaterThanOrEqual(20_000 - 5000 + 250);
    expect(replacedAfter).toBeLessThan(20_000 + 250 + 250);
  });
});

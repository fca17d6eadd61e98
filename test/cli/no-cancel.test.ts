/**
 * The CLI behind a path that drops protocol CancelRequests (AWS RDS Proxy and others): a
 * waiting `acquire --wait` and a following `run` still exit promptly on a signal, because a
 * cancel not obeyed within closeTimeoutMs (1 s by default) closes the connection instead.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { type Running, startCli } from '../harness/cli.js';
import { assertNoSessions, databaseUrl, eventually, lockHolders, randomKeys } from '../harness/db.js';
import { type FaultProxy, proxyTo } from '../harness/fault-proxy.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();
const running: Running[] = [];
let proxies: FaultProxy[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGKILL');
    await r.exited;
  }
  await Promise.all(proxies.map((p) => p.close()));
  proxies = [];
});

/** A holder on the direct path, and a CLI process queued behind it through a cancel-dropping proxy. */
async function queuedBehindProxy(args: (url: string, keys: string[]) => string[], id: string) {
  const proxy = await proxyTo(databaseUrl(), { dropCancels: true });
  proxies.push(proxy);
  const k = randomKeys();
  const holder = locks.make({ ...k });
  await holder.start();
  await holder.waitForLeadership();
  const r = startCli(
    args(proxy.url(databaseUrl()), ['--key1', String(k.key1), '--key2', String(k.key2), '--id', id]),
  );
  running.push(r);
  await eventually(async () => (await lockHolders(databaseUrl(), k.key1, k.key2)).length === 2, {
    what: 'the CLI to queue for the lock',
  });
  return { proxy, keys: k, r };
}

/** Signal the queued process; it must exit with `code` within 2 s, its queue place freed. */
async function signalled(
  q: Awaited<ReturnType<typeof queuedBehindProxy>>,
  signal: NodeJS.Signals,
  code: number,
  id: string,
) {
  const at = performance.now();
  q.r.proc.kill(signal);
  const done = await q.r.exited;
  const took = performance.now() - at;
  console.log(
    `[no cancel] ${id} exited ${took.toFixed(0)} ms after ${signal} (${q.proxy.cancelsDropped} cancel(s) dropped)`,
  );
  expect(done.code).toBe(code);
  expect(q.proxy.cancelsDropped).toBeGreaterThanOrEqual(1);
  // bound: cli/no-cancel-exit
  expect(took).toBeLessThan(2000);
  await eventually(async () => (await lockHolders(databaseUrl(), q.keys.key1, q.keys.key2)).length === 1, {
    timeoutMs: 3000,
    what: 'the queue to empty',
  });
  await assertNoSessions(id);
}

describe('the CLI behind a proxy that drops cancels', () => {
  it('acquire --wait: SIGINT while waiting exits 130 within 2 s and leaves the queue', async () => {
    const id = `${locks.tag}-nc-acquire`;
    const q = await queuedBehindProxy((url, k) => ['acquire', '--dsn', url, ...k, '--wait'], id);
    await signalled(q, 'SIGINT', 130, id);
  });

  it('run: SIGTERM while following exits 0 within 2 s and leaves the queue', async () => {
    const id = `${locks.tag}-nc-run`;
    const q = await queuedBehindProxy((url, k) => ['run', '--dsn', url, ...k, '--json'], id);
    await signalled(q, 'SIGTERM', 0, id);
  });
});

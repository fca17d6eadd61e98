/**
 * `LeaderWatch` observers next to the candidates, in a fraction of the LeaderLock scenarios
 * drawn from a stream of their own (the other seeds run as before; SIM_WATCHES=off runs
 * none). Each runs in a process of its own (no fault freezes or crashes it; a server restart
 * or stop ends its connection) with timings of its own.
 *
 * What is checked (docs/choosing-the-leader.md, "Watching who leads"): `leader` is the
 * holder of the lock on the server the watch is connected to, heard at its grant, a holder
 * gone seen within `healthIntervalMs` plus the read's time, a lost connection retried at
 * once and then on `retryStrategy`. So after the last fault, once the holder has not changed
 * for `boundMs` (the retry strategy's longest delay, a connection and its setup, a read's
 * interval and deadline, and the network's delays), every watch is connected and names that
 * holder (null when nobody holds the key). With the old primary kept running after a
 * promotion, the watch stays on it while its connection lives (documented): it is checked
 * against that server's holder.
 */
import { ExponentialBackoff } from '../../src/core/retry.js';
import { LeaderWatch } from '../../src/watch/leader-watch.js';
import { connector, type Front, type SimClient } from './net.js';
import { KEY, type WatchProfile } from './profile.js';
import { Random } from './random.js';
import type { Backend, SimServer } from './server.js';
import { Proc, type World } from './world.js';

/** One LeaderLock scenario in four without a pooler gets one or two watches. */
export function watchesFor(seed: number, pooled: boolean): WatchProfile[] {
  if (process.env.SIM_WATCHES === 'off' || pooled) return [];
  const rng = new Random((seed ^ 0x3a7c_4e55) >>> 0);
  if (!rng.chance(0.25)) return [];
  return Array.from({ length: rng.int(1, 2) }, () => ({
    at: rng.between(0, 1000),
    healthIntervalMs: rng.pick([100, 200, 500]),
    queryTimeoutMs: rng.pick([150, 300, 500]),
    retryMaxMs: rng.pick([200, 1000]),
  }));
}

export class SimWatch {
  readonly proc: Proc;
  readonly clients: SimClient[] = [];
  watch: LeaderWatch | null = null;
  /** close() was called (the end of the run): no longer checked. */
  closed = false;
  /** The application's next start() after a rejected one. */
  retry: unknown = null;
  /** What `onChange` was last called with (undefined: never called). */
  told: { id: string } | null | undefined = undefined;

  constructor(
    readonly index: number,
    readonly p: WatchProfile,
    world: World,
  ) {
    this.proc = new Proc(world, `w${index}`);
  }

  /** The server its live connection reaches (null: none). */
  server(): Front | null {
    return this.clients.find((c) => !c.ended)?.link.server ?? null;
  }

  /** How long after the holder last changed (or the last fault) it must name it. */
  boundMs(maxDelayMs: number): number {
    const p = this.p;
    return p.retryMaxMs + 3 * p.queryTimeoutMs + p.healthIntervalMs + 40 * maxDelayMs + 100;
  }
}

/** Start the scenario's watches (each at its `at`), their connections to `fronts`. */
export function startWatches(
  world: World,
  profiles: WatchProfile[],
  fronts: Front[],
  net: Parameters<typeof connector>[3],
  rng: Random,
  fail: (what: string) => void,
): SimWatch[] {
  return profiles.map((p, i) => {
    const w = new SimWatch(i, p, world);
    const connectTo = (front: Front) =>
      connector(world, front, rng, net, w.proc, `w${i}`, (client) => {
        w.clients.push(client);
        client.onUnhandled = (err) => fail(`w${i}: an 'error' with no listener: ${err.message}`);
      });
    world.schedule(p.at, w.proc, 'io', () => {
      const watch = new LeaderWatch({
        ...KEY,
        id: `watch-${i}`,
        connect: (fronts.length > 1 ? fronts.map(connectTo) : connectTo(fronts[0] as Front)) as never,
        healthIntervalMs: p.healthIntervalMs,
        queryTimeoutMs: p.queryTimeoutMs,
        closeTimeoutMs: 300,
        retryStrategy: new ExponentialBackoff({ baseMs: 50, maxMs: p.retryMaxMs, random: () => rng.next() }),
        clock: w.proc.clock,
        unref: true,
        logger: {
          debug: () => {},
          info: (f) => world.log(() => `w${i} info ${JSON.stringify(f)}`),
          warn: (f) => world.log(() => `w${i} warn ${JSON.stringify(f)}`),
          error: (f) => world.log(() => `w${i} error ${JSON.stringify(f)}`),
        },
      });
      // each onChange call is a change of `leader` (docs/choosing-the-leader.md): never null
      // twice in a row (the same id twice is a new grant to that candidate: a change; its
      // `since` is wall-clock time, equal to the millisecond here, so it cannot tell them apart)
      watch.onChange((l) => {
        world.log(() => `w${i} leader ${l ? l.id : 'null'}`);
        if (l === null && w.told === null) fail(`w${i}: onChange called with null twice in a row`);
        w.told = l ? { id: l.id } : null;
      });
      w.watch = watch;
      // a first connection that fails rejects start() and stops the watch (documented): the
      // application calls start() again
      const start = (): void => {
        watch.start().catch((e: unknown) => {
          world.log(() => `w${i} start rejected: ${String(e)}`);
          if (!w.closed) w.retry = w.proc.clock.setTimeout(start, p.retryMaxMs);
        });
      };
      start();
    });
    if (p.blackholeAt !== undefined) {
      world.schedule(p.blackholeAt, null, 'server', () => {
        for (const c of w.clients) if (!c.ended) c.link.blackhole();
        world.log(`w${i} blackholed`);
      });
    }
    if (p.closeAt !== undefined) {
      world.schedule(p.closeAt, w.proc, 'io', () => {
        w.closed = true;
        world.log(`w${i} close`);
        w.watch?.close().then(() => world.log(`w${i} closed`));
      });
    }
    return w;
  });
}

/**
 * The watch rule, checked at `now`: each started watch names `holderOn(its server)`'s id
 * once the holder has been the same since `since` + its bound. The first failure, or null.
 */
export function checkWatches(
  watches: SimWatch[],
  now: number,
  since: number,
  maxDelayMs: number,
  idOf: (server: SimServer) => { id: string | null; b: Backend | null },
): { ok: boolean; failure: string | null } {
  let ok = true;
  for (const w of watches) {
    const watch = w.watch;
    if (w.closed) continue;
    if (!watch) {
      ok = false;
      continue;
    }
    const front = w.server() as SimServer | null;
    const expected = front ? idOf(front).id : undefined;
    const named = watch.leader?.id ?? null;
    // the last onChange names what `leader` does (the callbacks are not behind)
    const told = w.told === undefined ? null : (w.told?.id ?? null);
    const right = watch.connected && expected !== undefined && named === expected && told === named;
    if (right) continue;
    ok = false;
    if (now > since + w.boundMs(maxDelayMs)) {
      return {
        ok,
        failure: `w${w.index}: names ${JSON.stringify(named)} (connected ${watch.connected}; its last onChange ${JSON.stringify(told)}) while the server it watches grants the key to ${JSON.stringify(expected ?? 'unknown: no connection')}, ${(now - since).toFixed(1)} ms after the last fault or change of holder (bound ${w.boundMs(maxDelayMs).toFixed(0)} ms)`,
      };
    }
  }
  return { ok, failure: null };
}

/** close() every started watch (in its process); `done` is called as each resolves. The count started. */
export function closeWatches(world: World, watches: SimWatch[], done: () => void): number {
  let n = 0;
  for (const w of watches) {
    const watch = w.watch;
    if (!watch) continue;
    n++;
    w.closed = true;
    world.schedule(0, w.proc, 'io', () => {
      w.proc.clock.clearTimeout(w.retry);
      watch.close().then(done, done);
    });
  }
  return n;
}

/** After close(): no connection and no timer of a watch left. */
export function watchLeaks(watches: SimWatch[]): string[] {
  const out: string[] = [];
  for (const w of watches) {
    const open = w.clients.filter((x) => !x.ended).length;
    if (open > 0) out.push(`w${w.index}: ${open} connection(s) left open after close()`);
    if (w.proc.clock.pending > 0)
      out.push(`w${w.index}: ${w.proc.clock.pending} timer(s) left after close()`);
  }
  return out;
}

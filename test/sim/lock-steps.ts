/**
 * A LeaderLock scenario's plan steps as they happen: operations run in the candidate's
 * process (held while it is frozen), faults on its connections, its process, the servers.
 */
import type { LeaderLock } from '../../src/leader/leader-lock.js';
import type { Candidate } from './candidate.js';
import type { Checker } from './checker.js';
import { type Cluster, FOLLOWER } from './failover.js';
import type { SimClient } from './net.js';
import type { Pooler } from './pooler.js';
import { KEY_ID, type Step } from './profile.js';
import type { Random } from './random.js';
import type { SimServer } from './server.js';
import { Proc, type World } from './world.js';

export interface LockRun {
  world: World;
  cands: Candidate[];
  checker: Checker;
  server: SimServer;
  servers: SimServer[];
  cluster: Cluster | null;
  pooler: Pooler | null;
  pickRng: Random;
  build: (c: Candidate) => LeaderLock;
}

/** A rejected call, logged. */
export function swallow(world: World, what: string): (e: unknown) => void {
  return (e: unknown) => world.log(() => `${what} rejected: ${e instanceof Error ? e.message : String(e)}`);
}

export function lockSteps(r: LockRun): {
  run: (s: Step) => void;
  freeze: (c: Candidate, ms: number, onThaw?: (() => void) | null) => void;
} {
  const { world, cands, checker, server, servers, cluster, pooler, pickRng, build } = r;
  const target = (who: number): Candidate | undefined => {
    if (who >= 0) return cands[who];
    const held = (c: Candidate) => servers.some((s) => s.holderOf(KEY_ID)?.owner === c.name);
    const followers = cands.filter((c) => c.live && !held(c));
    if (who === FOLLOWER) return pickRng.pick(followers.length > 0 ? followers : cands);
    const h = server.holderOf(KEY_ID);
    return cands.find((c) => h && c.name === h.owner) ?? pickRng.pick(cands);
  };
  // with a standby, a leader's to the server that grants it the key (not its peer watch's:
  // a peer it cannot reach proves nothing, docs/safety.md)
  const lockLink = (c: Candidate): SimClient | undefined => {
    const at = servers.length > 1 ? servers.find((s) => s.holderOf(KEY_ID)?.owner === c.name) : undefined;
    return [...c.clients].reverse().find((x) => !x.ended && (!at || x.link.server === at));
  };

  const freeze = (c: Candidate, ms: number, onThaw: (() => void) | null = null): void => {
    if (c.proc.frozen || c.crashed) return;
    world.log(`${c.name} frozen for ${ms} ms`);
    c.proc.frozen = true;
    checker.frozen(c);
    const proc = c.proc;
    checker.faultUntil(world.now + ms);
    world.schedule(ms, null, 'server', () => {
      world.thaw(proc);
      checker.thawed(c);
      onThaw?.();
      world.log(`${c.name} thawed`);
    });
  };

  const run = (s: Step): void => {
    world.log(() => `do ${JSON.stringify(s)}`);
    if (s.op === 'restart' && cluster) cluster.restart(s.ms);
    else if (s.op === 'restart') {
      server.stop();
      world.schedule(s.ms, null, 'server', () => {
        server.start();
        world.log('server up');
      });
    }
    if (s.op === 'restart') return;
    const c = target(s.who);
    if (!c) return;
    // an operation runs in the candidate's process: held while it is frozen
    const inProc = (fn: () => void): void => {
      world.schedule(0, c.proc, 'io', fn);
    };
    switch (s.op) {
      case 'start':
        if (c.crashed) {
          c.crashed = false;
          c.generation++;
          c.proc = new Proc(world, c.name);
          c.clients = [];
          c.lock = null;
        }
        c.starting = true;
        inProc(() => {
          c.starting = false;
          c.lock ??= build(c);
          c.lock.start().catch(swallow(world, `${c.name} start`));
        });
        return;
      case 'stepDown':
        inProc(() => {
          c.lock?.stepDown(s.ms ? { timeoutMs: s.ms } : {}).catch(swallow(world, `${c.name} stepDown`));
        });
        return;
      case 'shutdown':
        inProc(() => {
          if (c.lock)
            c.stopping.push(
              c.lock
                .shutdown(s.ms ? { timeoutMs: s.ms } : {})
                .then(
                  () => world.log(() => `${c.name} shutdown resolved`),
                  swallow(world, `${c.name} shutdown`),
                ),
            );
        });
        return;
      case 'handoverTo': {
        const to = cands[s.to];
        inProc(() => {
          if (to)
            c.lock
              ?.handoverTo(to.id, { timeoutMs: 1000 })
              .then(
                () => world.log(() => `${c.name} handoverTo resolved`),
                swallow(world, `${c.name} handoverTo`),
              );
        });
        return;
      }
      case 'crash':
        if (c.crashed || !c.lock) return;
        c.crashed = true;
        c.starting = false; // a start held by its frozen process dies with it
        c.proc.dead = true;
        checker.crashed(c);
        for (const x of c.clients) if (!x.ended) x.link.clientGone('crash');
        return;
      case 'freeze': {
        // with early timers, half the freezes of a leader end just before its lease does (early.ts)
        const edge = world.early?.leaseEdge() ?? null;
        const until = c.lock?.isLeader ? c.lock.leaseExpiresAt : null;
        const atEdge = edge !== null && until !== null;
        const ms = atEdge ? Math.max(0, until - world.now - edge) : (s.ms ?? 0);
        if (atEdge) world.log(() => `${c.name}: its freeze ends ${edge.toFixed(3)} ms before its lease does`);
        freeze(c, ms);
        return;
      }
      case 'freezeOnGrant':
        c.freezeOnGrant = s.ms ?? 0;
        c.thenBlackhole = s.thenBlackhole === true;
        return;
      case 'blackhole':
        lockLink(c)?.link.blackhole();
        return;
      case 'partition': {
        // healed after `ms`: its blackholed connections stay dead, new ones connect again
        c.proc.cutOff = true;
        for (const x of c.clients) if (!x.ended) x.link.blackhole();
        const proc = c.proc;
        if (s.ms !== undefined) {
          world.schedule(s.ms, null, 'server', () => {
            proc.cutOff = false;
          });
        }
        return;
      }
      case 'reset':
        lockLink(c)?.link.reset();
        return;
      case 'unlockAll': {
        const link = lockLink(c)?.link;
        if (link?.backend) (link.server as SimServer).locks.unlockAll(link.backend, 'unlock-all');
        return;
      }
      case 'terminate': {
        const link = lockLink(c)?.link;
        const b = pooler ? pooler.backendFor(link?.backend ?? null, KEY_ID, pickRng) : link?.backend;
        if (b) (pooler || !link ? server : (link.server as SimServer)).terminate(b.pid);
        return;
      }
    }
  };
  return { run, freeze };
}

/**
 * A partition scenario's plan steps as they happen: joins and leaves run in the worker's
 * process (held while it is frozen), faults on its member session, its process, the server.
 */
import type { PartitionedLeadership } from '../../src/partitions/partitioned.js';
import type { Cluster } from './failover.js';
import { swallow } from './lock-steps.js';
import type { SimClient } from './net.js';
import { type PartitionChecker, type Worker, workerName } from './partition-checker.js';
import type { PartitionStep } from './partition-profile.js';
import type { Pooler } from './pooler.js';
import type { Random } from './random.js';
import type { SimServer } from './server.js';
import { Proc, type World } from './world.js';

export interface PartitionRun {
  world: World;
  workers: Worker[];
  checker: PartitionChecker;
  server: SimServer;
  /** With a standby (failover.ts): the servers and which is the newest primary. */
  cluster: Cluster | null;
  pooler: Pooler | null;
  serverRng: Random;
  partitions: number;
  build: (w: Worker) => PartitionedLeadership;
}

export function partitionSteps(r: PartitionRun): { run: (s: PartitionStep) => void } {
  const { world, workers, checker, server, cluster, pooler, serverRng, partitions, build } = r;
  /** The member session's connection (its backend shows `#p<P>`), else the newest open one. */
  const memberLink = (w: Worker): SimClient | undefined => {
    const open = [...w.clients].reverse().filter((x) => !x.ended);
    return open.find((x) => x.link.backend?.appName.endsWith(`#p${partitions}`)) ?? open[0];
  };
  const freeze = (w: Worker, ms: number): void => {
    if (w.proc.frozen || w.crashed) return;
    world.log(`${workerName(w)} frozen for ${ms} ms`);
    w.proc.frozen = true;
    checker.frozen(w);
    const proc = w.proc;
    world.schedule(ms, null, 'server', () => {
      world.thaw(proc);
      if (w.proc === proc) checker.thawed(w);
      world.log(`${workerName(w)} thawed`);
    });
  };

  const run = (s: PartitionStep): void => {
    world.log(() => `do ${JSON.stringify(s)}`);
    if (s.op === 'restart' && cluster) {
      cluster.restart(s.ms); // of the newest primary
      return;
    }
    if (s.op === 'restart') {
      server.stop();
      world.schedule(s.ms, null, 'server', () => {
        server.start();
        world.log('server up');
      });
      return;
    }
    const w = workers[s.who];
    if (!w) return;
    const inProc = (fn: () => void): void => {
      world.schedule(0, w.proc, 'io', fn);
    };
    switch (s.op) {
      case 'start':
        if (w.crashed) {
          w.crashed = false;
          w.generation++;
          w.proc = new Proc(world, workerName(w));
          w.clients = [];
          w.pl = null;
          w.excusedUntil = -1;
          w.lostUnheard = false;
        }
        w.starting = true;
        inProc(() => {
          w.starting = false;
          w.member = true;
          w.pl ??= build(w);
          w.pl.start().catch((e: unknown) => {
            // refused: no member. Only behind a pooler that shares backends: elsewhere a start()
            // never rejects so (a pooler check that could not be completed is retried)
            if ((e as { code?: unknown })?.code === 'ERR_PGLEADERLOCK_UNSAFE') {
              w.member = false;
              if (!checker.shared)
                checker.fail(
                  `${workerName(w)}: start() rejected with ERR_PGLEADERLOCK_UNSAFE ${pooler ? 'through a session-mode pooler' : 'on a direct connection'}: ${(e as Error).message}`,
                );
            }
            swallow(world, `${workerName(w)} start`)(e);
          });
        });
        return;
      case 'shutdown':
        inProc(() => {
          if (!w.pl) return;
          w.member = false;
          w.stopping.push(
            w.pl.shutdown(s.ms ? { timeoutMs: s.ms } : {}).catch(swallow(world, `${workerName(w)} shutdown`)),
          );
        });
        return;
      case 'crash':
        if (w.crashed || !w.pl) return;
        w.crashed = true;
        w.member = false;
        w.starting = false;
        w.proc.dead = true;
        checker.crashed(w);
        for (const x of w.clients) if (!x.ended) x.link.clientGone('crash');
        return;
      case 'freeze': {
        // with early timers, half the freezes of an owner end just before its lease does (early.ts)
        const edge = world.early?.leaseEdge() ?? null;
        const until = w.pl && w.pl.owned.size > 0 ? w.pl.leaseExpiresAt : null;
        const atEdge = edge !== null && until !== null;
        const ms = atEdge ? Math.max(0, until - world.now - edge) : (s.ms ?? 0);
        if (atEdge)
          world.log(() => `${workerName(w)}: its freeze ends ${edge.toFixed(3)} ms before its lease does`);
        freeze(w, ms);
        return;
      }
      case 'blackhole':
        memberLink(w)?.link.blackhole();
        return;
      case 'reset':
        memberLink(w)?.link.reset();
        return;
      case 'terminate': {
        const link = memberLink(w)?.link;
        const h = link?.backend;
        const b = pooler ? pooler.backendFor(h, '', serverRng) : h;
        // with a standby, on the server the session is on
        if (b) (cluster && link ? (link.server as SimServer) : server).terminate(b.pid);
        return;
      }
    }
  };
  return { run };
}

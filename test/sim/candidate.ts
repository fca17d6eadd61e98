/** A LeaderLock scenario's candidate: the simulated process it runs in, its lock, and what the checker tracks of it. */
import type { LeaderLock } from '../../src/leader/leader-lock.js';
import type { SimClient } from './net.js';
import type { ReleaseCause } from './server.js';
import { Proc, type World } from './world.js';

/** A simulated process running one candidate (a crash and a restart make a new one with the same id). */
export class Candidate {
  proc: Proc;
  lock: LeaderLock | null = null;
  clients: SimClient[] = [];
  /** Crashed (its process is gone); a 'start' after it makes a new process. */
  crashed = false;
  /** Past shutdowns to wait for before the end. */
  readonly stopping: Promise<unknown>[] = [];
  /** The lock's term as last seen, and when it opened. */
  termId = 0;
  termOpenedAt = 0;
  /** When it last thawed from a freeze. */
  thawedAt = Number.NEGATIVE_INFINITY;
  /** Until then its terms and bodies are excused (a freeze, or an instant loss it could not hear). */
  excusedUntil = -1;
  lastLoss: { at: number; cause: ReleaseCause } | null = null;
  /** Its key was taken at once while its connection was blackholed, and it has not been granted since. */
  lostUnheard = false;
  /** When it last reported ERR_PGLEADERLOCK_UNSAFE (a pooler refusal). */
  refusedAt = Number.NEGATIVE_INFINITY;
  /** A start is on its way to the process (it runs there when the process next runs). */
  starting = false;
  /** Armed by a freezeOnGrant step: freeze this long when next granted the key. */
  freezeOnGrant = 0;
  thenBlackhole = false;
  generation = 0;

  constructor(
    readonly index: number,
    readonly id: string,
    readonly priority: number,
    world: World,
  ) {
    this.proc = new Proc(world, `c${index}`);
  }

  /** `c<index>.<generation>` (kept, not built at each of the checker's many looks). */
  get name(): string {
    if (this.nameGeneration !== this.generation) {
      this.nameGeneration = this.generation;
      this.cachedName = `c${this.index}.${this.generation}`;
    }
    return this.cachedName;
  }
  private cachedName = '';
  private nameGeneration = -1;

  get live(): boolean {
    return !this.crashed && this.lock !== null && !this.proc.dead;
  }
}

/**
 * Session advisory locks as PostgreSQL keeps them: one holder per key (re-entrant counts
 * on the holder's backend), a FIFO wait queue, a freed key granted at once to the first
 * waiter (its statement resumes a moment later), `pg_try_advisory_lock` refused while
 * anyone queues, `pg_advisory_unlock` false when not held, `pg_advisory_unlock_all`.
 */
import type { Random } from '../random.js';
import type { World } from '../world.js';
import type { Backend, ReleaseCause, Waiting } from './backend.js';

export interface LockEntry {
  holder: Backend | null;
  queue: Backend[];
}

export class LockTable {
  /** key -> holder and FIFO wait queue */
  readonly locks = new Map<string, LockEntry>();

  constructor(
    private readonly world: World,
    private readonly rng: Random,
    /** The key changed hands (holder null: free). */
    private readonly onHolder: (key: string, holder: Backend | null, cause: ReleaseCause | null) => void,
  ) {}

  holderOf(key: string): Backend | null {
    return this.locks.get(key)?.holder ?? null;
  }

  entry(key: string): LockEntry {
    let e = this.locks.get(key);
    if (!e) {
      e = { holder: null, queue: [] };
      this.locks.set(key, e);
    }
    return e;
  }

  /** pg_try_advisory_lock: re-entrant; refused while another holds it or anyone queues. */
  tryLock(b: Backend, key: string): boolean {
    const n = b.held.get(key);
    if (n !== undefined) {
      b.held.set(key, n + 1);
      return true;
    }
    const e = this.entry(key);
    if (e.holder !== null || e.queue.length > 0) return false;
    e.holder = b;
    b.held.set(key, 1);
    this.onHolder(key, b, null);
    return true;
  }

  /** pg_advisory_unlock: false (and a WARNING) when not held here. */
  unlock(b: Backend, key: string): boolean {
    const n = b.held.get(key);
    if (n === undefined) return false;
    if (n > 1) {
      b.held.set(key, n - 1);
      return true;
    }
    b.held.delete(key);
    this.freed(key, b, 'unlock');
    return true;
  }

  /** pg_advisory_unlock_all, or the backend's exit (`cause`). */
  unlockAll(b: Backend, cause: ReleaseCause = 'unlock'): void {
    for (const key of [...b.held.keys()]) {
      b.held.delete(key);
      this.freed(key, b, cause);
    }
  }

  /** Queue `b` for `key` (its `waiting` set). */
  enqueue(b: Backend, w: Waiting): void {
    b.waiting = w;
    this.entry(w.key).queue.push(b);
  }

  /** The key left `b`: grant it to the first waiter (at once; its statement resumes a moment later). */
  private freed(key: string, b: Backend, cause: ReleaseCause): void {
    const e = this.entry(key);
    if (e.holder !== b) return;
    e.holder = null;
    this.onHolder(key, null, cause);
    const next = e.queue.shift();
    if (!next) return;
    const w = next.waiting as Waiting;
    if (w.timer) w.timer.cancelled = true;
    next.waiting = null;
    e.holder = next;
    next.held.set(key, 1);
    this.onHolder(key, next, null);
    this.world.schedule(this.rng.between(0.01, 2), null, 'server', () => {
      if (next.alive) w.granted();
    });
  }

  /** `b` stops waiting (lock_timeout, or it exits). */
  leaveQueue(b: Backend): void {
    const w = b.waiting;
    if (!w) return;
    if (w.timer) w.timer.cancelled = true;
    b.waiting = null;
    const e = this.entry(w.key);
    e.queue = e.queue.filter((x) => x !== b);
  }
}

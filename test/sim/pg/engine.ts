/**
 * What the statements need of the server (`Engine`), and a statement that waits for a key
 * in its FIFO queue until granted or `lock_timeout`.
 */
import type { World } from '../world.js';
import type { Backend, Reply, Waiting } from './backend.js';
import type { LockTable } from './locks.js';
import type { Note } from './notify.js';

/** What the statements need of the server. */
export interface Engine {
  readonly world: World;
  readonly locks: LockTable;
  readonly backends: Map<number, Backend>;
  /** In recovery (a hot standby), and the timeline it is on as a primary. */
  readonly recovery: boolean;
  readonly timeline: number;
  /** The statement of `b` ends with `reply`. */
  finish(b: Backend, reply: Reply): void;
  /** set_config(name, value, false): the value as the server shows it. */
  set(b: Backend, name: string, value: string): string;
  terminate(pid: number): boolean;
  notify(notes: Note[]): void;
}

/** A wait for `key` (the statement of `b`): queued until granted or lock_timeout (55P03). */
export function queueFor(s: Engine, b: Backend, key: string, startedAt: number, granted: () => void): void {
  const lt = b.settings.get('lock_timeout') ?? 0;
  const w: Waiting = { key, since: startedAt, timer: null, granted };
  if (lt > 0) {
    w.timer = s.world.schedule(lt, null, 'server', () => {
      if (b.waiting !== w) return;
      s.locks.leaveQueue(b);
      s.finish(b, {
        error: { code: '55P03', message: 'canceling statement due to lock timeout', fatal: false },
      });
    });
  }
  s.locks.enqueue(b, w);
}

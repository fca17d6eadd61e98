/**
 * LISTEN/NOTIFY: a notification committed is delivered to the sessions listening at that
 * moment, in commit order; an idle session gets it at once, a busy one after its statement
 * (with its reply).
 */
import type { World } from '../world.js';
import type { Backend } from './backend.js';

export interface Note {
  channel: string;
  payload: string;
}

export function commitNotify(world: World, backends: Iterable<Backend>, notes: Note[]): void {
  const all = [...backends];
  for (const n of notes) {
    world.log(() => `server: NOTIFY ${n.payload}`);
    for (const r of all) {
      if (!r.alive || !r.listening.has(n.channel)) continue;
      r.pendingNotify.push(n);
    }
  }
  for (const r of all) {
    if (r.alive && !r.busy && r.pendingNotify.length > 0) {
      const sent = r.pendingNotify;
      r.pendingNotify = [];
      r.link.toClient({ notifications: sent, reply: null });
    }
  }
}

/**
 * The simulation's scheduler: one simulated time, one queue of events (timers of the
 * simulated processes, messages on the simulated network, the server's own timers), run
 * one at a time in (time, sequence) order. After each event every microtask and immediate
 * it caused runs (one macrotask turn) before the next event: the library under test reacts
 * to it completely. A process can be frozen: its timers and the messages it would read are
 * held, in order, until it thaws (or dropped if it is killed). Its timers may fire a little
 * before their deadline, as Node's do (early.ts).
 */
import type { Clock } from '../../src/core/clock.js';
import type { EarlyStreams } from './early.js';

export interface SimEvent {
  at: number;
  seq: number;
  /** The process that runs it (null: the server or the network). */
  proc: Proc | null;
  kind: 'timer' | 'io' | 'server';
  fn: () => void;
  cancelled: boolean;
}

/** A simulated client process: its clock's timers and its reads stop while it is frozen. */
export class Proc {
  frozen = false;
  dead = false;
  /** Cut off from the network (a `partition` step): its new connections hang, as its open ones do. */
  cutOff = false;
  /** Events due while frozen, run in order when it thaws. */
  held: SimEvent[] = [];
  readonly clock: Clock & { readonly pending: number };
  private readonly timers = new Set<SimEvent>();

  constructor(
    readonly world: World,
    readonly name: string,
  ) {
    const timers = this.timers;
    // early.ts: how much before its deadline each timer fires (none: on time)
    const early = world.early?.forProcess() ?? null;
    this.clock = {
      now: () => world.now,
      setTimeout: (fn, ms) => {
        const due = Math.max(0, ms);
        const ev = world.schedule(early ? due - early(due) : due, this, 'timer', () => {
          timers.delete(ev);
          fn();
        });
        timers.add(ev);
        return ev;
      },
      clearTimeout: (handle) => {
        const ev = handle as SimEvent | undefined;
        if (!ev || !timers.has(ev)) return;
        ev.cancelled = true;
        timers.delete(ev);
      },
      get pending() {
        return timers.size;
      },
    };
  }
}

export class World {
  now = 0;
  private seq = 0;
  private readonly heap: SimEvent[] = [];
  /** The event trace (only when tracing). */
  readonly trace: string[] | null;
  steps = 0;

  constructor(
    tracing: boolean,
    /** Its processes' timers fire early (early.ts); null: on time. */
    readonly early: EarlyStreams | null = null,
  ) {
    this.trace = tracing ? [] : null;
  }

  log(line: string | (() => string)): void {
    if (this.trace) this.trace.push(`${this.now.toFixed(3)} ${typeof line === 'string' ? line : line()}`);
  }

  schedule(delayMs: number, proc: Proc | null, kind: SimEvent['kind'], fn: () => void): SimEvent {
    const ev: SimEvent = { at: this.now + delayMs, seq: this.seq++, proc, kind, fn, cancelled: false };
    this.push(ev);
    return ev;
  }

  /** Thaw a frozen process: its held timers (by due time), then its held reads, run now. */
  thaw(proc: Proc): void {
    if (!proc.frozen) return;
    proc.frozen = false;
    const held = proc.held;
    proc.held = [];
    const timers = held.filter((e) => e.kind === 'timer').sort((a, b) => a.at - b.at || a.seq - b.seq);
    const reads = held.filter((e) => e.kind !== 'timer');
    for (const ev of [...timers, ...reads]) {
      ev.at = this.now;
      ev.seq = this.seq++;
      this.push(ev);
    }
  }

  /** Time of the next event, or Infinity. */
  get nextAt(): number {
    return this.heap[0]?.at ?? Number.POSITIVE_INFINITY;
  }

  /**
   * Run the next event (and everything it causes). False when none is due by `until`.
   */
  async step(until: number): Promise<boolean> {
    if (!this.next(until)) return false;
    await turn();
    return true;
  }

  /**
   * `while (more() && (await step(until()))) after();` in the same order, without a promise
   * per event: each event runs in the macrotask turn after the one before it (its
   * microtasks, and the immediates queued before that turn, run in between).
   */
  run(until: () => number, more: () => boolean, after: () => void): Promise<void> {
    return new Promise((resolve) => {
      const go = (): void => {
        if (more() && this.next(until())) setImmediate(then);
        else resolve();
      };
      const then = (): void => {
        after();
        go();
      };
      go();
    });
  }

  /** Run the next event due by `until` (its synchronous part); false when none is. */
  private next(until: number): boolean {
    for (;;) {
      const ev = this.heap[0];
      if (!ev || ev.at > until) return false;
      this.pop();
      if (ev.cancelled) continue;
      if (ev.proc?.dead) continue;
      if (ev.proc?.frozen) {
        ev.proc.held.push(ev);
        continue;
      }
      if (ev.at > this.now) this.now = ev.at;
      this.steps++;
      ev.fn();
      return true;
    }
  }

  private push(ev: SimEvent): void {
    const h = this.heap;
    h.push(ev);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = h[p] as SimEvent;
      if (!before(ev, parent)) break;
      h[i] = parent;
      i = p;
    }
    h[i] = ev;
  }

  private pop(): void {
    const h = this.heap;
    const last = h.pop() as SimEvent;
    const n = h.length;
    if (n === 0) return;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = last;
      let mi = i;
      if (l < n && before(h[l] as SimEvent, m)) {
        m = h[l] as SimEvent;
        mi = l;
      }
      if (r < n && before(h[r] as SimEvent, m)) {
        m = h[r] as SimEvent;
        mi = r;
      }
      if (mi === i) break;
      h[i] = m;
      i = mi;
    }
    h[i] = last;
  }
}

function before(a: SimEvent, b: SimEvent): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}

/** One macrotask turn: every microtask queued so far, and the immediates queued before it, run. */
function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

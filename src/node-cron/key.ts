/**
 * The fire keys node-cron v4 passes to a run coordinator: `<task name>:<scheduled time>`, the
 * time as `Date.prototype.toISOString()` gives it (`2026-03-01T03:00:00.000Z`; years past
 * 9999 as `+010000-…`). The time is the schedule's slot, not the moment the fire ran, so
 * every replica derives the same key for the same fire whatever its clock reads.
 */
import { show } from '../core/validate.js';

/** One scheduled fire: the task's name and the instant it was scheduled for. */
export interface Fire {
  /** The task's `name` (it may contain `:`). */
  readonly task: string;
  /** The instant the fire was scheduled for (not when it ran). */
  readonly fireAt: Date;
}

const KEY = /^([\s\S]+):((?:\d{4}|[+-]\d{6})-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)$/;

/**
 * Split a node-cron fire key into the task name (which may itself contain `:`) and the
 * scheduled time. Throws a `TypeError` for anything else, so that node-cron skips the fire
 * (it fails closed) instead of running it uncoordinated.
 */
export function parseFireKey(key: unknown): Fire {
  if (typeof key !== 'string') throw new TypeError(`a fire key must be a string, received ${show(key)}`);
  const m = KEY.exec(key);
  const iso = m?.[2];
  const task = m?.[1];
  const fireAt = iso === undefined ? null : new Date(iso);
  // a date that does not exist (2026-02-30) parses to another day or to NaN: round-trip it
  if (
    task === undefined ||
    iso === undefined ||
    fireAt === null ||
    Number.isNaN(fireAt.getTime()) ||
    fireAt.toISOString() !== iso
  ) {
    throw new TypeError(
      `not a node-cron fire key ("<task name>:<ISO time>", e.g. "report:2026-03-01T03:00:00.000Z"), received ${show(key)}`,
    );
  }
  return { task, fireAt };
}

/** The key node-cron builds for `task` fired at `fireAt` (the inverse of {@link parseFireKey}). */
export function fireKey(task: string, fireAt: Date): string {
  return `${task}:${fireAt.toISOString()}`;
}

/**
 * `pgleaderlock resign` and `pgleaderlock handover`: ask the current leader, on its key's
 * channel, to step down cleanly, or to hand over to a named waiting candidate
 * (docs/choosing-the-leader.md). Unlike `break`, nothing is terminated: the leader ends its
 * term, its work stops (within its `callbackTimeoutMs`), and it releases the lock; the
 * command reports what the channel shows. Anyone who may NOTIFY on the database can send
 * such a request (docs/cli.md).
 */
import { performance } from 'node:perf_hooks';
import { systemClock } from '../core/clock.js';
import type { Directive } from '../core/handover.js';
import { applicationName } from '../core/identity.js';
import { channelFor } from '../core/keys.js';
import { type PinnedRow, refuseSharedBackends } from '../core/pooler.js';
import type { Found } from '../core/primary.js';
import { type Candidate, inspect, type LockInspection } from '../leader/inspect.js';
import { SUCCESSOR } from '../leader/sql.js';
import {
  type Dsn,
  type Keys,
  type OptionSpec,
  optionalDuration,
  redact,
  UsageError,
  type Values,
} from './args.js';
import { EXIT, explain, findPrimaryOrExit, humanMs } from './common.js';
import { Channel, type Request } from './request-channel.js';

/** How long to wait for the leader's outcome by default: its own bound, `callbackTimeoutMs`, is 10 s by default. */
export const REQUEST_TIMEOUT_MS = 15_000;
/** After a resign's release: how long to wait for the next holder's `acquired`, to name it. */
export const NEXT_LEADER_WINDOW_MS = 2000;
/** How often to look again while the holder is pending (its takeover delay). */
const PENDING_POLL_MS = 100;

const TIMEOUT_OPTION: OptionSpec = {
  name: 'timeout',
  type: 'string',
  value: 'DURATION',
  default: '15s',
  help: 'give up (exit 1) if the leader has not released (resign) or the successor does not hold the lock (handover) by then',
};

export const RESIGN_OPTIONS: OptionSpec[] = [TIMEOUT_OPTION];

export const HANDOVER_OPTIONS: OptionSpec[] = [
  { name: 'to', type: 'string', value: 'ID', help: 'the waiting candidate to hand leadership to (its --id)' },
  TIMEOUT_OPTION,
];

/** What the command prints: one line of text, or one JSON object with the same facts. */
interface Outcome {
  ok: boolean;
  message: string;
  fields: Record<string, unknown>;
}

function who(c: Candidate): string {
  return `${c.id || '(no application_name)'} (pid ${c.pid})`;
}

/** A leader's `released` event: who released, when it arrived. */
interface Release {
  id: string;
  atMs: number;
  /** A release that hands over (poll mode's resign: to a known candidate). */
  directive: Directive | null;
}

/** Inspect the key on a connection of its own to the primary found. */
function look(found: Found, keys: Keys): Promise<LockInspection> {
  return inspect({ connect: found.endpoint.connect, key1: keys.key1, key2: keys.key2, timeoutMs: 5000 });
}

function keyText(keys: Keys): string {
  return `key (${keys.key1}, ${keys.key2})${keys.name === undefined ? '' : ` (name ${JSON.stringify(keys.name)})`}`;
}

/** Who holds the key now, for messages after a failure. */
async function holderNow(found: Found, keys: Keys): Promise<{ text: string; id: string | null }> {
  try {
    const now = await look(found, keys);
    return now.leader
      ? { text: `${who(now.leader)} holds it now`, id: now.leader.id }
      : { text: 'nobody holds it now', id: null };
  } catch {
    return { text: 'who holds it now is unknown (look with status)', id: null };
  }
}

/**
 * The leader to ask: the current holder, once its term is open (a holder in its takeover
 * delay ignores requests: wait for it, within the deadline). Refusals as outcomes.
 */
async function leaderToAsk(
  ch: Channel,
  found: Found,
  keys: Keys,
  deadline: number,
): Promise<{ leader: Candidate; found: LockInspection } | Outcome> {
  for (;;) {
    const r = await look(found, keys);
    const leader = r.leader;
    if (leader === null) {
      return {
        ok: false,
        message: `nobody holds ${keyText(keys)}: there is no leader to ask`,
        fields: { leader: null },
      };
    }
    const { rows } = await ch.client.query<{ application_name: string | null }>(
      'SELECT application_name FROM pg_stat_activity WHERE pid = $1',
      [leader.pid],
    );
    const app = rows[0]?.application_name ?? '';
    if (!app.startsWith('pgleaderlock:') && rows.length > 0) {
      return {
        ok: false,
        message: `${keyText(keys)} is held by ${who(leader)}, which is not a pgleaderlock candidate: it cannot be asked (break terminates a holder)`,
        fields: { leader: leader.id },
      };
    }
    if (!r.pending) return { leader, found: r };
    if (performance.now() >= deadline) {
      return {
        ok: false,
        message: `${who(leader)} holds ${keyText(keys)} but its term had not opened (takeover delay) before the --timeout ran out: it was not asked`,
        fields: { leader: leader.id },
      };
    }
    await new Promise((r) => setTimeout(r, PENDING_POLL_MS));
  }
}

/** Handover: is `to` a candidate the leader can hand over to? Null if so, else the refusal. */
async function checkSuccessor(
  ch: Channel,
  keys: Keys,
  to: string,
  state: LockInspection,
): Promise<Outcome | null> {
  const app = applicationName(to);
  const { rows } = await ch.client.query<{ holds: boolean; waits: boolean; sessions: number }>(SUCCESSOR, [
    keys.key1,
    keys.key2,
    app,
  ]);
  const s = rows[0];
  if (s?.holds)
    return {
      ok: false,
      message: `${JSON.stringify(to)} already leads ${keyText(keys)}`,
      fields: { leader: to },
    };
  // wait mode: queued for the key; poll mode: a candidate is idle between attempts, its session open
  if (s?.waits || (s?.sessions ?? 0) > 0) return null;
  const waiting = state.waiters.map((w) => w.id).join(', ');
  return {
    ok: false,
    message: `no candidate ${JSON.stringify(to)} is waiting for ${keyText(keys)}: no session has application_name ${JSON.stringify(app)}${waiting ? ` (waiting: ${waiting})` : ''}`,
    fields: { waiters: state.waiters.map((w) => w.id) },
  };
}

/**
 * Refuse a pooler that shares backends before anything is sent (core/pooler.ts): behind
 * one, the LISTEN and the request would stay on a pooled backend, and the outcome this
 * command waits for would never reach it (it acted, then reported failure).
 */
async function refuseShared(found: Found, keys: Keys, dsn: Dsn, timeoutMs: number): Promise<void> {
  const client = found.client;
  try {
    await refuseSharedBackends({
      query: async (text, values) => (await client.query<PinnedRow>(text, values)).rows,
      announcedPid: (client as unknown as { processID?: number | null }).processID ?? null,
      connect: found.endpoint.connect,
      key1: keys.key1,
      key2: keys.key2,
      clock: systemClock,
      timeoutMs: Math.min(timeoutMs, 5000),
    });
  } catch (err) {
    throw new UsageError(`cannot ask through ${redact(dsn.url)}: ${explain(err)}`, { cause: err });
  }
}

/** What a resign's outcome reads: the events after the request (exported for unit tests). */
export async function resignOutcome(
  ch: Pick<Channel, 'next'>,
  found: Found,
  keys: Keys,
  leader: Candidate,
  deadline: number,
  timeoutMs: number,
): Promise<Outcome> {
  let released: Release | null = null;
  for (;;) {
    const h = await ch.next(deadline);
    if (h === null) break;
    const e = h.event;
    if (e.kind === 'released') {
      released = { id: e.id, atMs: h.atMs, directive: e.directive };
      break;
    }
    if (e.kind === 'acquired') {
      // the lock changed hands with no release: the leader's session ended without one
      return {
        ok: false,
        message: `${who(leader)} did not release cleanly: its session ended without a release (its work had not stopped within its callbackTimeoutMs and its session was closed by force, or it lost the lock); ${e.id} leads now, after its takeover delay`,
        fields: { leader: leader.id, resigned: null, next: e.id, ms: round(h.atMs) },
      };
    }
  }
  if (released === null) {
    const now = await holderNow(found, keys);
    return {
      ok: false,
      message: `${who(leader)} did not release within ${humanMs(timeoutMs)} (--timeout): its work may ignore its abort signal, or it runs a pgleaderlock that does not take requests; see its log (resign_requested, forced_close); ${now.text}`,
      fields: { leader: leader.id, resigned: null, next: now.id },
    };
  }
  const resigned = released.id;
  const windowEnd = performance.now() + NEXT_LEADER_WINDOW_MS;
  const to = released.directive?.to ?? null;
  let next: { id: string; atMs: number } | null = null;
  // a release that hands over to `to`: another waiter granted first gives the lock back
  // before its term opens (a yield: its `released` with a directive, succession.ts); it is
  // the next holder only if it does not (`to` is gone)
  let granted: { id: string; atMs: number } | null = null;
  while (next === null) {
    const h = await ch.next(windowEnd).catch(() => null); // the resign is done; a late failure changes nothing
    if (h === null) break;
    const e = h.event;
    if (e.kind === 'acquired') {
      if (to === null || e.id === to) next = { id: e.id, atMs: h.atMs };
      else granted = { id: e.id, atMs: h.atMs };
    } else if (e.kind === 'released' && e.directive !== null && e.id === granted?.id) granted = null;
  }
  next ??= granted;
  const base = `${resigned} resigned: released the lock cleanly ${humanMs(released.atMs)} after the request`;
  const nextId = next?.id ?? null;
  const tail =
    nextId === null
      ? `; no candidate took the lock within ${humanMs(NEXT_LEADER_WINDOW_MS)} of the release (a candidate in poll mode takes it at its next attempt)`
      : nextId === resigned
        ? `; ${nextId} leads again (no other candidate took the lock)`
        : `; ${nextId} leads now`;
  return {
    ok: true,
    message: base + tail,
    fields: {
      leader: leader.id,
      resigned,
      releasedMs: round(released.atMs),
      next: nextId,
      nextMs: next ? round(next.atMs) : null,
    },
  };
}

async function handoverOutcome(
  ch: Channel,
  found: Found,
  keys: Keys,
  leader: Candidate,
  to: string,
  deadline: number,
  timeoutMs: number,
): Promise<Outcome> {
  let released: Release | null = null;
  for (;;) {
    const h = await ch.next(deadline);
    if (h === null) break;
    const e = h.event;
    if (e.kind === 'released') released ??= { id: e.id, atMs: h.atMs, directive: e.directive };
    if (e.kind !== 'acquired') continue;
    if (released === null) {
      return {
        ok: false,
        message: `${who(leader)} did not hand over cleanly: its session ended without a release (its work had not stopped within its callbackTimeoutMs and its session was closed by force, or it lost the lock); ${e.id} leads now, after its takeover delay`,
        fields: { leader: leader.id, to, next: e.id, ms: round(h.atMs) },
      };
    }
    if (e.id === to) {
      return {
        ok: true,
        message: `${released.id} handed over to ${to}: ${to} holds the lock ${humanMs(h.atMs)} after the request`,
        fields: { leader: leader.id, to, releasedMs: round(released.atMs), acquiredMs: round(h.atMs) },
      };
    }
    // another waiter granted on the way: it gives the lock back before its term opens (succession.ts)
  }
  const now = await holderNow(found, keys);
  return {
    ok: false,
    message: `${JSON.stringify(to)} did not take the lock within ${humanMs(timeoutMs)} (--timeout)${released === null ? `: ${leader.id} did not release (see its log: handover_requested, handover_failed, forced_close)` : ''}; ${now.text}`,
    fields: { leader: leader.id, to, next: now.id },
  };
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

/** `--timeout` of resign and handover, in ms: REQUEST_TIMEOUT_MS unless given. */
export function requestTimeoutOf(values: Values): number {
  return optionalDuration(values, 'timeout') ?? REQUEST_TIMEOUT_MS;
}

export async function request(
  command: 'resign' | 'handover',
  values: Values,
  dsn: Dsn,
  keys: Keys,
  json: boolean,
  out: NodeJS.WritableStream,
): Promise<number> {
  let req: Request = { kind: 'resign' };
  if (command === 'handover') {
    const to = values.to;
    if (typeof to !== 'string')
      throw new UsageError('missing --to ID: the waiting candidate to hand over to');
    if (to === '') throw new UsageError('--to must not be empty');
    req = { kind: 'handover', to };
  }
  const timeoutMs = requestTimeoutOf(values);
  if (timeoutMs <= 0)
    throw new UsageError(`--timeout must be more than 0, received ${JSON.stringify(values.timeout)}`);
  const found = (await findPrimaryOrExit(dsn, `pgleaderlock-${command}`)) as Found;
  const ch = new Channel(found.client, channelFor(keys.key1, keys.key2));
  const print = (o: Outcome): number => {
    const code = o.ok ? EXIT.OK : EXIT.NOT_ACQUIRED;
    if (json) {
      out.write(
        `${JSON.stringify({ command, key1: keys.key1, key2: keys.key2, ...(keys.name === undefined ? {} : { name: keys.name }), ok: o.ok, ...o.fields, message: o.message, code })}\n`,
      );
    } else out.write(`${o.message}\n`);
    return code;
  };
  try {
    await refuseShared(found, keys, dsn, timeoutMs);
    // listening before looking: nothing that happens after the look is missed
    await ch.listen();
    const deadline = performance.now() + timeoutMs;
    const asked = await leaderToAsk(ch, found, keys, deadline);
    if ('ok' in asked) return print(asked);
    if (req.kind === 'handover') {
      const refused = await checkSuccessor(ch, keys, req.to, asked.found);
      if (refused)
        return print({ ...refused, fields: { leader: asked.leader.id, to: req.to, ...refused.fields } });
    }
    await ch.send(req);
    return print(
      req.kind === 'resign'
        ? await resignOutcome(ch, found, keys, asked.leader, deadline, timeoutMs)
        : await handoverOutcome(ch, found, keys, asked.leader, req.to, deadline, timeoutMs),
    );
  } finally {
    await found.client.end().catch(() => {});
  }
}

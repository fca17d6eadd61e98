/** The proof of a clean handover and the proof of drain (src/core/handover.ts), event by event. */
import { describe, expect, it } from 'vitest';
import {
  drainedPayload,
  forwardPayload,
  HandoverLog,
  handoverTimeoutOf,
  MAX_HANDOVER_TIMEOUT_MS,
  parseEvent,
  payload,
  requestPayload,
  waitingPayload,
} from '../../src/core/handover.js';

const ev = (text: string) => {
  const e = parseEvent(text);
  if (!e) throw new Error(`unparsed: ${text}`);
  return e;
};
/** The backend pid each session's `acquired` names (the drained events below name the same). */
const PIDS: Record<string, number> = { sa: 101, sc: 102, 'sa-old': 100, sb: 103, sx: 104, me: 1 };
const acquired = (id: string, s: string, pid: number | null = PIDS[s] ?? null) =>
  ev(payload('acquired', id, s, 0, pid));
const released = (id: string, s: string) => ev(payload('released', id, s));
const drained = (id: string, s: string, lost: string, pid: number) =>
  ev(drainedPayload(id, s, { session: lost, pid }));

/** A log for session `me`, with `atConnect` the holder's backend pid when it connected. */
function log(atConnect: number | null = null) {
  return new HandoverLog('me', () => atConnect);
}

describe('proof of drain', () => {
  it('the previous holder (seen acquiring) announcing its lost session drained is proof', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(acquired('b', 'me'));
    expect(l.takeProof().clean).toBe(false); // not a clean release
    expect(l.previousDrained()).toBe(false);
    l.see(drained('a', 'sa2', 'sa', 101));
    expect(l.previousDrained()).toBe(true);
  });

  it('a drained that arrived before the grant event still counts (the race between the two commits)', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(drained('a', 'sa2', 'sa', 101));
    l.see(acquired('b', 'me'));
    expect(l.takeProof().clean).toBe(false); // a drained is no release
    expect(l.previousDrained()).toBe(true);
  });

  it('no acquired seen since connect: the holder at connect is named by its backend pid', () => {
    const l = log(4242);
    l.see(acquired('b', 'me'));
    expect(l.previousDrained()).toBe(false);
    l.see(drained('a', 'sa2', 'whatever', 4243)); // another backend
    expect(l.previousDrained()).toBe(false);
    l.see(drained('a', 'sa2', 'whatever', 4242));
    expect(l.previousDrained()).toBe(true);
  });

  it('proves nothing: a drained of an earlier term of the same candidate (an older session)', () => {
    const l = log();
    l.see(acquired('a', 'sa-old'));
    l.see(acquired('a', 'sa')); // a took the lock again on a new session
    l.see(drained('a', 'sa2', 'sa-old', 100)); // stale: for the older session
    l.see(acquired('b', 'me'));
    expect(l.previousDrained()).toBe(false);
  });

  it('proves nothing: a drained naming a session that was not the previous holder', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(acquired('c', 'sc')); // c held after a
    l.see(acquired('b', 'me'));
    l.see(drained('a', 'sa2', 'sa', 101));
    expect(l.previousDrained()).toBe(false);
    l.see(drained('c', 'sc2', 'sc', 102));
    expect(l.previousDrained()).toBe(true);
  });

  it('proves nothing: nothing seen and nobody holding at connect (a server restart, the first holder)', () => {
    const l = log(null);
    l.see(acquired('b', 'me'));
    l.see(drained('a', 'sa2', 'sa', 101));
    expect(l.previousDrained()).toBe(false);
  });

  it('a duplicated event changes nothing', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(acquired('b', 'me'));
    const d = drained('a', 'sa2', 'sa', 101);
    l.see(d);
    l.see(d);
    expect(l.previousDrained()).toBe(true);
    const other = log();
    other.see(acquired('a', 'sa'));
    other.see(acquired('a', 'sa'));
    other.see(acquired('b', 'me'));
    expect(other.previousDrained()).toBe(false);
  });

  it("proves nothing: a drained naming the previous holder's token on another backend (two processes that drew the same token from alike seeded `random`s)", () => {
    const l = log();
    l.see(acquired('a', 'tok', 201));
    l.see(acquired('b', 'me'));
    l.see(drained('c', 'c2', 'tok', 202)); // c's lost session had drawn the same token
    expect(l.previousDrained()).toBe(false);
    l.see(drained('a', 'a2', 'tok', 201)); // a's own
    expect(l.previousDrained()).toBe(true);
  });

  it("proves nothing: an `acquired` that names no backend (an older version's event)", () => {
    const l = log();
    l.see(acquired('a', 'sa', null));
    l.see(acquired('b', 'me'));
    l.see(drained('a', 'sa2', 'sa', 101));
    expect(l.previousDrained()).toBe(false);
  });

  it('an `acquired` event carries the backend pid it names, and one without it parses with none', () => {
    expect(parseEvent(payload('acquired', 'a', 'sa', 3, 4242))).toEqual({
      kind: 'acquired',
      id: 'a',
      session: 'sa',
      priority: 3,
      pid: 4242,
    });
    expect(parseEvent('{"e":"acquired","id":"a","s":"sa","p":3}')).toMatchObject({ pid: null });
    expect(parseEvent('{"e":"acquired","id":"a","s":"sa","p":3,"b":"7"}')).toMatchObject({ pid: null });
  });

  it('malformed payloads are dropped (parseEvent returns null)', () => {
    for (const text of [
      '{',
      '{"e":"drained","id":"a","s":"x"}', // no lost session
      '{"e":"drained","id":"a","s":"x","lost":"sa"}', // no pid
      '{"e":"drained","id":"a","s":"x","lost":"","pid":1}', // empty session
      '{"e":"drained","id":"a","s":"x","lost":"sa","pid":"1"}',
      '{"e":"other","id":"a","s":"x"}',
      '{"e":"released","id":1,"s":"x"}',
    ]) {
      expect(parseEvent(text), text).toBeNull();
    }
  });

  it('a clean release stays the proof it was, drained events or not', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(released('a', 'sa'));
    l.see(drained('z', 'sz2', 'sz', 7));
    l.see(acquired('b', 'me'));
    expect(l.takeProof().clean).toBe(true);
  });
});

describe('a handover’s successor heard taking the lock (tookOver)', () => {
  it('true only for an `acquired` heard after this session’s own last `released`; another session’s release does not count as ours', () => {
    const l = new HandoverLog('me', () => null);
    l.see(acquired('b', 'sb')); // before any release of ours
    expect(l.tookOver('b')).toBe(false);
    l.see(released('x', 'sx')); // another session's release
    l.see(acquired('b', 'sb'));
    expect(l.tookOver('b')).toBe(false);
    l.see(released('me', 'me'));
    expect(l.tookOver('b')).toBe(false);
    l.see(acquired('b', 'sb'));
    l.see(released('b', 'sb')); // it handed on already
    expect(l.tookOver('b')).toBe(true);
    expect(l.tookOver('c')).toBe(false);
    l.see(released('me', 'me')); // a later release of ours starts afresh
    expect(l.tookOver('b')).toBe(false);
  });
});

describe('what the proof reads, and what it ignores', () => {
  it('a candidate joining, a request or a handover ask between the release and the grant leave it clean', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(released('a', 'sa'));
    l.see(ev(waitingPayload('c', 'sc', 2))); // another candidate joins meanwhile
    l.see(ev('{"e":"resign"}'));
    l.see(ev('{"e":"handover","to":"c"}'));
    l.see(acquired('b', 'me'));
    expect(l.takeProof().clean).toBe(true);
  });

  it('a waiting event carries its candidate, session and priority', () => {
    expect(parseEvent(waitingPayload('c', 'sc', 2))).toEqual({
      kind: 'waiting',
      id: 'c',
      session: 'sc',
      priority: 2,
    });
  });

  it("an older version's plain-id announcement is an `acquired`: a holder after the release, so no clean proof", () => {
    expect(parseEvent('worker-7')).toEqual({
      kind: 'acquired',
      id: 'worker-7',
      session: '',
      priority: 0,
      pid: null,
    });
    const l = log();
    l.see(released('a', 'sa'));
    l.see(ev('worker-7')); // an old-version candidate took the lock after a's release
    l.see(acquired('b', 'me'));
    expect(l.takeProof().clean).toBe(false);
  });

  it('a drained naming the previous holder’s backend pid on another session (a reused pid) proves nothing', () => {
    const l = log();
    l.see(acquired('a', 'sa')); // backend 101
    l.see(acquired('b', 'me'));
    l.see(drained('c', 'sc2', 'sc-other', 101));
    expect(l.previousDrained()).toBe(false);
  });

  it('after a release heard, the backend that held the lock at connect is no longer the previous holder', () => {
    const l = log(4242);
    l.see(released('a', 'sa'));
    l.see(acquired('b', 'me'));
    l.see(drained('a', 'sa2', 'whatever', 4242));
    expect(l.previousDrained()).toBe(false);
  });

  it('the proof of drain is kept among the 8 newest drained events', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(drained('a', 'sa2', 'sa', 101));
    for (let i = 0; i < 7; i++) l.see(drained('z', `z${i}`, `zz${i}`, 900 + i));
    l.see(acquired('b', 'me'));
    expect(l.previousDrained()).toBe(true); // 8 kept
    l.see(drained('z', 'z7', 'zz7', 907));
    expect(l.previousDrained()).toBe(false); // the ninth pushed it out
  });

  it('malformed: an event without an id or session, a drained field on another kind, a bad directive', () => {
    for (const text of [
      '{"e":"acquired","s":"x","p":1}',
      '{"e":"acquired","id":"a","p":1}',
      '{"e":"waiting","id":"a"}',
      '{"e":"other","id":"a","s":"x","lost":"sa","pid":1}',
      '{"e":"drained","id":"a","s":"x","lost":7,"pid":1}',
    ]) {
      expect(parseEvent(text), text).toBeNull();
    }
    const directive = (extra: Record<string, unknown>) =>
      (parseEvent(JSON.stringify({ e: 'released', id: 'a', s: 'x', ...extra })) as { directive: unknown })
        .directive;
    const good = { to: 'b', back: 'a', until: 1000, backUntil: 2000 };
    expect(directive(good)).toEqual(good);
    expect(directive({ ...good, back: null })).toEqual({ ...good, back: null });
    for (const bad of [
      { to: '' },
      { to: 5 },
      { until: 1.5 },
      { until: '1000' },
      { backUntil: null },
      { back: 3 },
      { back: undefined },
    ]) {
      expect(directive({ ...good, ...bad }), JSON.stringify(bad)).toBeNull();
    }
    expect(parseEvent(forwardPayload('a', 'x', good))).toMatchObject({ directive: good });
  });
});

describe('handoverTo arguments (handoverTimeoutOf)', () => {
  it('an empty id is refused by name', () => {
    expect(() => handoverTimeoutOf('', {})).toThrow(
      new TypeError('handoverTo: id must be a non-empty string, received ""'),
    );
    expect(() => handoverTimeoutOf('a\u0000b', {})).toThrow(/^handoverTo: id must be printable/);
  });

  it('timeoutMs from 1 to MAX_HANDOVER_TIMEOUT_MS (60 s) inclusive', () => {
    expect(handoverTimeoutOf('b', { timeoutMs: MAX_HANDOVER_TIMEOUT_MS })).toBe(60_000);
    expect(() => handoverTimeoutOf('b', { timeoutMs: 0 })).toThrow(
      new RangeError('handoverTo: timeoutMs must be between 1 and 60000, received 0'),
    );
    expect(() => handoverTimeoutOf('b', { timeoutMs: 60_001 })).toThrow(RangeError);
    expect(() => handoverTimeoutOf('b', 5)).toThrow(/^handoverTo options must be an object/);
  });
});

describe('requests and the proof read once', () => {
  it('the CLI’s requests (resign, handover) read back as sent', () => {
    expect(parseEvent(requestPayload(null))).toEqual({ kind: 'resign' });
    expect(parseEvent(requestPayload({ to: 'b' }))).toEqual({ kind: 'handover', to: 'b' });
  });

  it('a grant’s proof is read once: nothing heard is no proof, and a second read is none', () => {
    expect(log().takeProof()).toEqual({ clean: false, directive: null });
    const l = log();
    l.see(released('a', 'sa'));
    l.see(acquired('b', 'me'));
    expect(l.takeProof()).toEqual({ clean: true, directive: null });
    expect(l.takeProof()).toEqual({ clean: false, directive: null });
  });
});

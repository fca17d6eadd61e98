/** The partition assignment (src/partitions/assign.ts): balanced, deterministic, stable; and the hand-over bookkeeping (handovers.ts, epochs.ts). */
import { describe, expect, it } from 'vitest';
import { assign, bestFirst } from '../../src/partitions/assign.js';
import { epochsOf } from '../../src/partitions/epochs.js';
import { drainedNotices, Handovers, partitionNotices } from '../../src/partitions/handovers.js';

const ids = (n: number, from = 0): string[] => Array.from({ length: n }, (_, i) => `worker-${from + i}`);
const owners = (a: Map<string, number[]>): Map<number, string> => {
  const out = new Map<number, string>();
  for (const [id, ps] of a) for (const p of ps) out.set(p, id);
  return out;
};
const moved = (a: Map<string, number[]>, b: Map<string, number[]>, P: number): number => {
  const oa = owners(a);
  const ob = owners(b);
  let n = 0;
  for (let p = 0; p < P; p++) if (oa.get(p) !== ob.get(p)) n++;
  return n;
};

describe('assign', () => {
  it.each([
    [1024, 8],
    [1024, 7],
    [10, 3],
    [3, 5],
    [4096, 64],
    [1, 1],
  ])('%i partitions over %i members: each exactly once, every member ⌊P/N⌋ or ⌈P/N⌉', (P, N) => {
    const a = assign(ids(N), P);
    const all = [...a.values()].flat().sort((x, y) => x - y);
    expect(all).toEqual([...Array(P).keys()]);
    for (const list of a.values()) {
      expect(list.length).toBeGreaterThanOrEqual(Math.floor(P / N));
      expect(list.length).toBeLessThanOrEqual(Math.ceil(P / N));
    }
  });

  it('is a function of the member set: order and duplicates do not matter', () => {
    const a = assign(['b', 'a', 'c'], 100);
    const b = assign(['c', 'a', 'b', 'a'], 100);
    expect(b).toEqual(a);
    expect(assign([], 10).size).toBe(0);
  });

  // A rolling deploy runs two releases side by side: they must compute the same map, or
  // each takes partitions the other holds. Changing any of these is a breaking change.
  it.each([
    [ids(5), 12, '103422434102'],
    [ids(6), 12, '105423034152'],
    [['a', 'b', 'c'], 40, '2000112202012220212100100201021111110202'],
    [['api-7f9c', 'batch', 'x', 'Z.1'], 30, '120303111312030123302133002022'],
  ])('the same map in every release: %j over %i partitions (owners by sorted index)', (members, P, want) => {
    const sorted = [...members].sort();
    const owner = owners(assign(members, P));
    expect(Array.from({ length: P }, (_, p) => sorted.indexOf(owner.get(p) as string)).join('')).toBe(want);
  });

  it('orders pairs best score first, ties by lower index, past 2²¹ pairs too (the index then takes 22 bits)', () => {
    const count = 2 ** 21 + 1; // the last index, 2²¹, needs the 22nd bit
    const scores = new Uint32Array(count);
    scores[count - 1] = 7;
    scores[5] = 3;
    const order = bestFirst(scores);
    expect(Array.from(order.subarray(0, 4))).toEqual([count - 1, 5, 0, 1]);
    expect(order[count - 1]).toBe(count - 2);
  }, 30_000); // a sort of 2²¹ pairs: about 1 s at load 6, past the unit project's 5 s at load 15+

  it('is stable: a join or a leave moves little more than one share (1024 partitions, 8 workers)', () => {
    const P = 1024;
    for (let trial = 0; trial < 5; trial++) {
      const eight = ids(8, trial * 10);
      const base = assign(eight, P);
      const joined = assign([...eight, `new-${trial}`], P);
      const left = assign(eight.slice(1), P);
      // ideal: the newcomer's 113–114, the leaver's 128
      expect(moved(base, joined, P)).toBeLessThanOrEqual(Math.ceil(1.25 * Math.ceil(P / 9)));
      expect(moved(base, left, P)).toBeLessThanOrEqual(
        Math.ceil(1.25 * (base.get(eight[0] as string)?.length ?? 0)),
      );
    }
  });
});

describe('Handovers (what a worker hears on its channel)', () => {
  const members = new Set(['a', 'b', 'c']);
  const make = () => new Handovers((id) => members.has(id));

  it('a released partition is clean until someone announces taking it; a took that came first cancels the mark', () => {
    const h = make();
    h.hear('released:a:1,2,3');
    expect(h.delayNeeded([1, 4])).toEqual({ clean: [1], delayed: [4] });
    expect(h.delayNeeded([1])).toEqual({ clean: [], delayed: [1] }); // the mark is used once
    h.hear('took:b:2'); // b holds 2 again: it may die holding it
    expect(h.delayNeeded([2])).toEqual({ clean: [], delayed: [2] });
    h.hear('took:c:5');
    h.hear('released:a:5'); // a's release of 5 arrived after c's take: c holds it, no mark
    expect(h.delayNeeded([5])).toEqual({ clean: [], delayed: [5] });
    h.hear('released:c:5'); // the holder's own release marks it
    expect(h.delayNeeded([3, 5])).toEqual({ clean: [3, 5], delayed: [] });
  });

  it('deaths: a member that left cleanly, or that is no member, is no death; each death is taken once; reset forgets all', () => {
    const h = make();
    h.hear('left:a');
    expect(h.died('a')).toBe(false);
    expect(h.died('zed')).toBe(false);
    expect(h.died('b')).toBe(true);
    h.hear('died:c');
    expect(h.anyDeaths).toBe(true);
    expect([...h.takeDeaths()].sort()).toEqual(['b', 'c']);
    expect(h.anyDeaths).toBe(false);
    h.hear('released:b:7');
    h.reset();
    expect(h.died('a')).toBe(true); // its leave was heard by an earlier session
    expect(h.delayNeeded([7])).toEqual({ clean: [], delayed: [7] });
  });

  describe('proof of drain: a drained notice of exactly the previous holder ends the takeover delay', () => {
    const withProofs = () => {
      const proven: number[][] = [];
      const h = new Handovers(
        (id) => members.has(id),
        (ps) => proven.push(ps),
      );
      return { h, proven };
    };
    const drained = (id: string, token: string, pid: number, ps: number[]) =>
      drainedNotices(id, { token, pid }, ps)[0] as string;

    it('the session whose took was heard last: its drained, heard after the take, ends the delay of the partitions it names', () => {
      const { h, proven } = withProofs();
      h.hear('took:a:1,2,3:tokA:11');
      expect(h.delayNeeded([1, 2, 3])).toEqual({ clean: [], delayed: [1, 2, 3] });
      h.hear(drained('a', 'tokA', 11, [1, 3]));
      expect(proven).toEqual([[1, 3]]);
      h.hear(drained('a', 'tokA', 11, [1, 3])); // a duplicate: nothing more
      expect(proven).toEqual([[1, 3]]);
    });

    it("proves nothing: a drained with the previous session's token but another backend or worker (tokens drawn from alike seeded `random`s collide), nor a take that names no backend", () => {
      const { h, proven } = withProofs();
      h.hear('took:a:1,2:tok:11');
      h.hear('took:b:3:tokB'); // an older version's take: no backend pid
      expect(h.delayNeeded([1, 2, 3])).toEqual({ clean: [], delayed: [1, 2, 3] });
      h.hear(drained('c', 'tok', 15, [1, 2])); // c's lost session drew the same token
      h.hear(drained('a', 'tok', 15, [1])); // another backend
      h.hear(drained('c', 'tok', 11, [2])); // another worker
      h.hear(drained('b', 'tokB', 12, [3]));
      expect(proven).toEqual([]);
      h.hear(drained('a', 'tok', 11, [1, 2]));
      expect(proven).toEqual([[1, 2]]);
    });

    it('heard before the take: the partitions are taken without the delay', () => {
      const { h, proven } = withProofs();
      h.hear('took:a:1,2:tokA:11');
      h.hear(drained('a', 'tokA', 11, [1, 2]));
      expect(h.delayNeeded([1, 2, 5])).toEqual({ clean: [1, 2], delayed: [5] });
      expect(proven).toEqual([]);
    });

    it('proves nothing: another session, an earlier session of the same worker, a partition it does not name', () => {
      const { h, proven } = withProofs();
      h.hear('took:a:1:tokA1:11');
      h.hear('took:a:1:tokA2:14'); // a took p again on its next session: that session is the previous holder
      h.hear('took:b:2:tokB:12');
      expect(h.delayNeeded([1, 2])).toEqual({ clean: [], delayed: [1, 2] });
      h.hear(drained('a', 'tokA1', 11, [1])); // the earlier session
      h.hear(drained('c', 'tokC', 13, [1, 2])); // another worker's session
      h.hear(drained('b', 'tokB', 12, [3])); // b's own, but not naming 2
      expect(proven).toEqual([]);
      h.hear(drained('a', 'tokA2', 14, [1]));
      expect(proven).toEqual([[1]]);
    });

    it('no took heard since joining: the member that held it at the first reconcile, by id and backend pid', () => {
      const { h, proven } = withProofs();
      h.membersAtJoin([
        { id: 'a', pid: 11 },
        { id: 'b', pid: 12 },
      ]);
      h.membersAtJoin([{ id: 'a', pid: 99 }]); // only the first reconcile counts
      expect(h.delayNeeded([1, 2, 3])).toEqual({ clean: [], delayed: [1, 2, 3] });
      h.hear(drained('a', 'tokX', 99, [1])); // a's id with another backend: not the session seen at join
      h.hear(drained('c', 'tokC', 13, [2])); // no member at join
      expect(proven).toEqual([]);
      h.hear(drained('b', 'tokB', 12, [2, 3]));
      expect(proven).toEqual([[2, 3]]);
    });

    it('proves nothing: no previous holder known (nothing heard, no reconcile yet), or a release heard since', () => {
      const { h, proven } = withProofs();
      expect(h.delayNeeded([1])).toEqual({ clean: [], delayed: [1] });
      h.membersAtJoin([{ id: 'a', pid: 11 }]);
      h.hear('took:a:2:tokA:11');
      h.hear('released:a:2');
      expect(h.delayNeeded([2])).toEqual({ clean: [2], delayed: [] }); // the clean mark, used once
      expect(h.delayNeeded([2])).toEqual({ clean: [], delayed: [2] });
      h.hear(drained('a', 'tokA', 11, [1, 2]));
      expect(proven).toEqual([]);
    });

    it("a partition taken again since: an earlier take's proof ends nothing; another primary up: no proof is looked for", () => {
      const { h, proven } = withProofs();
      h.hear('took:a:1:tokA:11');
      expect(h.delayNeeded([1])).toEqual({ clean: [], delayed: [1] });
      h.hear('took:b:1:tokB:12');
      expect(h.delayNeeded([1], false)).toEqual({ clean: [], delayed: [1] }); // split: no proof
      h.hear(drained('a', 'tokA', 11, [1]));
      h.hear(drained('b', 'tokB', 12, [1]));
      expect(proven).toEqual([]);
      h.hear(drained('b', 'tokB', 12, [1]));
      expect(h.delayNeeded([1], false)).toEqual({ clean: [], delayed: [1] });
    });

    it('malformed notices are ignored; reset forgets what was heard', () => {
      const { h, proven } = withProofs();
      h.hear('took:a:1:tokA:11');
      expect(h.delayNeeded([1])).toEqual({ clean: [], delayed: [1] });
      for (const bad of [
        'drained',
        'drained:a',
        'drained:a:1',
        'drained:a:1:tokA',
        'drained:a:1:tokA:x',
        'drained:a::tokA:11',
        'drained:a:x,y:tokA:11',
        ':::::',
      ]) {
        h.hear(bad);
      }
      expect(proven).toEqual([]);
      h.hear('took:a:2:tokA:11');
      h.hear(drained('a', 'tokA', 11, [2]));
      h.reset();
      expect(h.delayNeeded([2])).toEqual({ clean: [], delayed: [2] });
      h.hear(drained('a', 'tokA', 11, [1]));
      expect(proven).toEqual([]); // what the delay of 1 waited for was forgotten with the session
    });
  });

  it('partitionNotices: at most 1000 partitions per notice, under the 8000-byte NOTIFY limit', () => {
    const all = [...Array(4096).keys()];
    const notices = partitionNotices('released', 'x'.repeat(40), all);
    expect(notices).toHaveLength(5);
    expect(notices.every((n) => Buffer.byteLength(n) < 8000)).toBe(true);
    expect(notices.flatMap((n) => (n.split(':')[2] as string).split(',').map(Number))).toEqual(all);
    expect(partitionNotices('took', 'w', [])).toEqual([]);
  });

  it('epochsOf: the bump rows as partition to epoch, beyond 2^53', () => {
    expect(epochsOf([{ partition: 3, epoch: '9007199254740993' }])).toEqual(
      new Map([[3, 9007199254740993n]]),
    );
  });
});

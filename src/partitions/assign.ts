/**
 * Which member owns which partition: a pure function of the member ids and the partition
 * count, so every worker computes the same answer from the same membership with no
 * coordination. Bounded-load rendezvous hashing: (partition, member) pairs are taken best
 * score first, each while its partition is free and its member below its share, so it is
 *  - balanced: every member gets ⌊P/N⌋ or ⌈P/N⌉ partitions;
 *  - stable: a member joining or leaving moves little more than its share, because most
 *    partitions keep their top-scoring member (measured in test/unit/partitions.test.ts).
 */

/** 32-bit FNV-1a of a string, then a murmur3 finalizer (FNV alone clusters on short keys). */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return mix32(h);
}

/** A 32-bit integer mix (murmur3's finalizer). */
function mix32(x: number): number {
  let h = x | 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** member → its partitions (ascending). Members are deduplicated; an empty list owns nothing. */
export function assign(members: readonly string[], partitions: number): Map<string, number[]> {
  const ids = [...new Set(members)].sort();
  const out = new Map<string, number[]>(ids.map((id) => [id, []]));
  const n = ids.length;
  if (n === 0) return out;
  // who gets ⌈P/N⌉: the first P mod N by a hash of their id (not their sorted position,
  // which a join would shift for everyone after it)
  const base = Math.floor(partitions / n);
  const extra = partitions % n;
  const byHash = [...ids].sort((a, b) => hash32(a) - hash32(b) || (a < b ? -1 : 1));
  const room = new Map(byHash.map((id, i) => [id, base + (i < extra ? 1 : 0)]));
  // every (partition, member) pair by score, best first; a pair is taken when its
  // partition is still free and its member below its share (greedy stable matching)
  const seeds = ids.map((id) => hash32(id));
  const count = partitions * n;
  const scores = new Uint32Array(count);
  for (let p = 0; p < partitions; p++) {
    const hp = mix32(p + 0x9e3779b9);
    for (let i = 0; i < n; i++) scores[p * n + i] = mix32(hp ^ (seeds[i] as number));
  }
  const pairs = bestFirst(scores);
  const taken = new Uint8Array(partitions);
  const left = ids.map((id) => room.get(id) ?? 0);
  let assigned = 0;
  for (const index of pairs) {
    if (assigned === partitions) break;
    const p = Math.floor(index / n);
    const i = index % n;
    if (taken[p] || (left[i] ?? 0) === 0) continue;
    taken[p] = 1;
    left[i] = (left[i] ?? 0) - 1;
    out.get(ids[i] as string)?.push(p);
    assigned++;
  }
  for (const list of out.values()) list.sort((a, b) => a - b);
  return out;
}

/**
 * The pair indices ordered by score, highest first, then by index: (score, index) packed in
 * one float64 so that a native numeric sort orders them (1,024 × 8 in about 1.5 ms). The
 * index takes 21 bits and the score 32; above 2²¹ pairs (e.g. 4,096 partitions × 512
 * members) the index takes what it needs and the score's low bits make room for it, so
 * ties between equal truncated scores go to the lower index (the same on every worker).
 */
export function bestFirst(scores: Uint32Array): Uint32Array {
  const count = scores.length;
  const indexBits = Math.max(21, Math.ceil(Math.log2(count + 1)));
  const drop = 2 ** (indexBits - 21); // the score keeps 53 - indexBits bits
  const slots = 2 ** indexBits;
  const top = slots - 1;
  const packed = new Float64Array(count);
  // best last: the higher score, then the lower index
  for (let k = 0; k < count; k++) packed[k] = Math.floor((scores[k] as number) / drop) * slots + (top - k);
  packed.sort();
  const out = new Uint32Array(count);
  for (let k = 0; k < count; k++) out[k] = top - ((packed[count - 1 - k] as number) % slots);
  return out;
}

/**
 * Shrinking a failing scenario: drop steps of its plan (operations and faults; the starts
 * are kept) one at a time while it still fails, until no single step can go. Each try is
 * the same seed with `drop`: everything else the seed decides stays as it was drawn.
 */
import { type Options, runScenario } from './scenario.js';

export async function shrink(
  seed: number,
  o: Options = {},
): Promise<{ kept: string[]; dropped: number[]; total: number }> {
  const first = await runScenario(seed, { ...o, trace: false });
  const total = first.plan.length;
  const dropped = new Set<number>();
  let progress = true;
  let tries = 0;
  while (progress && tries < 100) {
    progress = false;
    for (let i = 0; i < total && tries < 100; i++) {
      if (dropped.has(i) || first.plan[i]?.op === 'start') continue;
      tries++;
      const next = new Set(dropped).add(i);
      const r = await runScenario(seed, { ...o, trace: false, drop: next });
      if (r.violations.length > 0) {
        dropped.add(i);
        progress = true;
      }
    }
  }
  const kept = first.plan.flatMap((s, i) => (dropped.has(i) ? [] : [`[${i}] ${JSON.stringify(s)}`]));
  return { kept, dropped: [...dropped].sort((a, b) => a - b), total };
}

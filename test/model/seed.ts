/**
 * The fast-check settings of the model and property tests: one seed (`FC_SEED`, default
 * fixed) so a failure replays exactly (fast-check prints the seed and the shrunk
 * counterexample; `FC_SEED=<seed>` reruns it), and how many runs (`FC_RUNS` scales them).
 */
export const SEED = Number(process.env.FC_SEED ?? 20_261_202);
const SCALE = Number(process.env.FC_RUNS_SCALE ?? 1);

export function params(numRuns: number): { seed: number; numRuns: number } {
  return { seed: SEED, numRuns: Math.max(1, Math.round(numRuns * SCALE)) };
}

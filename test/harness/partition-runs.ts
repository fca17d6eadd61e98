/** Reading the run reports of partition workers in processes of their own (chaos test, bench). */

/** One report: a run of partition `p` started or ended in worker `id`, at `at` (monotonic ms). */
export interface RunReport {
  id: string;
  at: number;
  ev: string;
  p?: number;
}

/**
 * partition → id of the worker whose run is going, from the start/end reports in arrival
 * order; a killed worker's runs ended at its kill (it cannot report their end).
 */
export function runningFrom(
  reports: readonly RunReport[],
  killed: ReadonlyMap<string, number> | ReadonlySet<string>,
): Map<number, string> {
  const out = new Map<number, string>();
  for (const m of reports) {
    if (m.p === undefined) continue;
    if (m.ev === 'start') out.set(m.p, m.id);
    else if (m.ev === 'end' && out.get(m.p) === m.id) out.delete(m.p);
  }
  for (const [p, id] of out) if (killed.has(id)) out.delete(p);
  return out;
}

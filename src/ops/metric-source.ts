/** What every metrics source writes through: one family at a time, label values quoted as the text format wants. */

/** Writes one metric family: `# HELP`, `# TYPE` and a sample per label set (`labels` without braces). */
export type MetricWriter = (
  name: string,
  type: 'gauge' | 'counter',
  help: string,
  samples: [labels: string, value: number][],
) => void;

/** One target's metrics (metrics-partitions.ts has the partition worker's). */
export interface MetricsSource<S> {
  snapshot(): S;
  /** Every family, from `s`, each name without the `pgleaderlock_` prefix. */
  render(s: S, metric: MetricWriter): void;
  close(): void;
}

/** A label value as the text format wants it: backslash, double quote and newline escaped. */
export function quoted(value: string): string {
  return `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

/** bench/restart-follow.ts's figures: one trial's, and the table of all (the lock's beside the floor's). */
import os from 'node:os';

export type Kind = 'lock' | 'floor';

/** One trial's figures (ms after the server accepted again, unless said). */
export type Trial = {
  downtime: number;
  lateRead: number;
  attemptsPerSecondDown: number;
  grant: number;
  term: number;
  /** Per follower, its first connection after accepting: begun, connected, first statement answered, lock asked. */
  begun: number[];
  connected: number[];
  firstStatement: number[];
  lockAsked: number[];
  begunFirst500: number;
  failedAfterUp: number;
  /** The first grant's connection: begun, connected, first statement answered, lock asked, granted. */
  path: number[];
  errors: Map<string, number>;
};

export function print(
  results: Record<Kind, Trial[]>,
  c: {
    TRIALS: number;
    WAIT_MS: number;
    FOLLOWERS: number;
    MODE: string;
    PROCESSES: number;
    loadAtStart: number[];
  },
): void {
  const sorted = (xs: number[]) => xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  const at = (s: number[], q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
  const p = (xs: number[], q: number) => at(sorted(xs), q).toFixed(0);
  const all = (ts: Trial[], pick: (t: Trial) => number) => {
    const s = sorted(ts.map(pick));
    return `${at(s, 0.5).toFixed(0)} (${s.map((x) => x.toFixed(0)).join(', ')})`;
  };
  const range = (ts: Trial[], pick: (t: Trial) => number) => {
    const s = sorted(ts.map(pick));
    return `${(s[0] ?? Number.NaN).toFixed(0)}–${(s.at(-1) ?? Number.NaN).toFixed(0)}`;
  };
  const pooled = (ts: Trial[], pick: (t: Trial) => number[]) => {
    const xs = ts.flatMap(pick);
    return `${p(xs, 0.5)} / ${p(xs, 0.9)}`;
  };
  const perFollower = (ts: Trial[], pick: (t: Trial, k: number) => number) =>
    p(
      ts.flatMap((t) => t.connected.map((_, k) => pick(t, k))),
      0.5,
    );
  const spread = (t: Trial) => {
    const slots = new Map<number, number>();
    for (const x of t.connected) slots.set(Math.floor(x / 10), (slots.get(Math.floor(x / 10)) ?? 0) + 1);
    return `${slots.size}/${Math.max(...slots.values())}`;
  };
  const cpu = os.cpus();
  console.log(
    `\n${c.MODE} mode, ${c.FOLLOWERS} follower(s) ${c.PROCESSES > 1 ? `in ${c.PROCESSES} processes` : 'in one process'}, ${c.TRIALS} trials each, waited ${c.WAIT_MS} ms before each restart; ` +
      `${cpu.length} × ${cpu[0]?.model ?? '?'}, node ${process.version}; load average at start ${c.loadAtStart.map((l) => l.toFixed(1)).join(' ')}, at end ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
  );
  const kinds = (Object.keys(results) as Kind[]).filter((k) => results[k].length > 0);
  const rows: [string, (ts: Trial[]) => string][] = [
    ['restart (stop → accepting), ms', (ts) => range(ts, (t) => t.downtime)],
    ['"ready" line read late by, ms', (ts) => range(ts, (t) => t.lateRead)],
    ['connect attempts / s while down (all followers)', (ts) => range(ts, (t) => t.attemptsPerSecondDown)],
    ['connects begun in the first 500 ms', (ts) => range(ts, (t) => t.begunFirst500)],
    [
      'connects begun after accepting and not used (failed, abandoned)',
      (ts) => range(ts, (t) => t.failedAfterUp),
    ],
    ['accepting → first grant, p50 (all)', (ts) => all(ts, (t) => t.grant)],
    ['accepting → term open, p50 (all)', (ts) => all(ts, (t) => t.term)],
    [
      'first grant: begun / connected / 1st answer / asked / granted, p50',
      (ts) =>
        [0, 1, 2, 3, 4]
          .map((k) =>
            p(
              ts.map((t) => t.path[k] ?? Number.NaN),
              0.5,
            ),
          )
          .join(' / '),
    ],
    ['accepting → connect begun, p50 / p90', (ts) => pooled(ts, (t) => t.begun)],
    ['accepting → connected, p50 / p90', (ts) => pooled(ts, (t) => t.connected)],
    ['accepting → first statement answered, p50 / p90', (ts) => pooled(ts, (t) => t.firstStatement)],
    ['accepting → lock asked, p50 / p90', (ts) => pooled(ts, (t) => t.lockAsked)],
    [
      'connect itself (begun → connected), p50',
      (ts) => perFollower(ts, (t, k) => (t.connected[k] ?? 0) - (t.begun[k] ?? 0)),
    ],
    [
      'set-up (connected → lock asked), p50',
      (ts) => perFollower(ts, (t, k) => (t.lockAsked[k] ?? 0) - (t.connected[k] ?? 0)),
    ],
    ['distinct 10 ms slots / busiest, per trial', (ts) => ts.map(spread).join(', ')],
  ];
  console.log(`| ${['after the server accepts again', ...kinds].join(' | ')} |`);
  console.log(`| ${['---', ...kinds.map(() => '---')].join(' | ')} |`);
  for (const [name, f] of rows) console.log(`| ${[name, ...kinds.map((k) => f(results[k]))].join(' | ')} |`);
}

/**
 * `npm run test:sim`: N seeded scenarios on both cores (worker threads), exit code 1 on any
 * violation. SIM_SEED (base seed, default 1), SIM_SCENARIOS (default 10000), SIM_TRACE=<file>
 * (the full event trace, in scenario order: the same seed and count give the same bytes),
 * SIM_REPLAY=<scenario seed> (run that one scenario, trace to stdout or SIM_TRACE),
 * SIM_WORKERS (default: the cores, at most 2), SIM_EARLY_TIMERS=off (every timer on time,
 * early.ts). The last line is
 * `sim: <N> scenarios, <V> violations, base seed <S>`.
 */
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { isPartitionSeed } from './partition-profile.js';
import { describeProfile, runScenario } from './scenario.js';
import { shrink } from './shrink.js';
import type { WorkerResult } from './worker.js';

const base = Number(process.env.SIM_SEED ?? 1) >>> 0;
const count = Number(process.env.SIM_SCENARIOS ?? 10_000);
const tracePath = process.env.SIM_TRACE;
const replay = process.env.SIM_REPLAY;
/** SIM_IDS=verbatim: only ids that application_name carries as they are (what `npm test` runs while issue 35 is open). */
const verbatimIds = process.env.SIM_IDS === 'verbatim';

if (replay !== undefined) {
  const drop = new Set((process.env.SIM_DROP ?? '').split(',').filter(Boolean).map(Number));
  const r = await runScenario(Number(replay) >>> 0, { trace: true, drop, verbatimIds });
  const text = `${(r.trace ?? []).join('\n')}\n`;
  if (tracePath) writeFileSync(tracePath, text);
  else process.stdout.write(text);
  for (const v of r.violations) console.log(`violation: ${v}`);
  console.log(
    `sim: 1 scenarios, ${r.violations.length ? 1 : 0} violations, base seed ${Number(replay) >>> 0}`,
  );
  process.exit(r.violations.length ? 1 : 0);
}

const workers = Math.max(1, Math.min(Number(process.env.SIM_WORKERS ?? 2), os.availableParallelism()));
const started = performance.now();
const results = await Promise.all(
  Array.from({ length: workers }, (_, w) => {
    return new Promise<WorkerResult[]>((resolve, reject) => {
      // a worker's entry cannot be TypeScript on Node 20: register tsx there, then import it
      const entry = new URL('./worker.ts', import.meta.url).href;
      const boot = `import('tsx/esm/api').then((t) => { t.register(); return import(${JSON.stringify(entry)}); })`;
      const worker = new Worker(boot, {
        eval: true,
        workerData: { base, count, worker: w, workers, trace: tracePath !== undefined, verbatimIds },
      });
      worker.on('message', resolve);
      worker.on('error', reject);
      worker.on('exit', (code) => {
        if (code !== 0) reject(new Error(`worker ${w} exited with code ${code}`));
      });
    });
  }),
);
const all = results.flat().sort((a, b) => a.index - b.index);
const failedSeeds = all.filter((r) => r.violations.length > 0).map((r) => r.seed);
const seconds = (performance.now() - started) / 1000;
if (tracePath) writeFileSync(tracePath, all.map((r) => r.trace ?? '').join(''));
const failed = all.filter((r) => r.violations.length > 0);
const steps = all.reduce((n, r) => n + r.steps, 0);
const simSeconds = all.reduce((n, r) => n + r.simMs, 0) / 1000;
const partitionRuns = all.filter((r) => isPartitionSeed(r.seed)).length;
console.log(
  `${count} scenarios (${partitionRuns} of them PartitionedLeadership) in ${seconds.toFixed(1)} s on ${workers} worker(s): ${(count / seconds).toFixed(1)} scenarios/s, ${steps} steps (${(steps / seconds / 1000).toFixed(1)}k steps/s), ${simSeconds.toFixed(0)} s simulated`,
);
if (failed.length > 0) console.log(`failing scenario seeds: ${failedSeeds.join(' ')}`);
/** Failing scenarios shrunk (each shrink reruns the scenario up to 100 times, on one core). */
const shrinkFirst = Number(process.env.SIM_SHRINK ?? 3);
for (const [i, r] of failed.slice(0, 20).entries()) {
  console.log(`\nscenario ${r.index}: seed ${r.seed}`);
  for (const v of r.violations) console.log(`  ${v}`);
  console.log(`  profile: ${describeProfile(r.seed, { verbatimIds })}`);
  if (i >= shrinkFirst) continue;
  const s = await shrink(r.seed, { verbatimIds });
  console.log(
    `  shrunk plan (${s.kept.length} of ${s.total} steps; replay: SIM_REPLAY=${r.seed}${s.dropped.length ? ` SIM_DROP=${s.dropped.join(',')}` : ''}${verbatimIds ? ' SIM_IDS=verbatim' : ''}${process.env.SIM_EARLY_TIMERS === 'off' ? ' SIM_EARLY_TIMERS=off' : ''} npm run test:sim):`,
  );
  for (const line of s.kept) console.log(`    ${line}`);
}
console.log(`sim: ${count} scenarios, ${failed.length} violations, base seed ${base}`);
process.exitCode = failed.length > 0 ? 1 : 0;

/** A worker thread of `npm run test:sim`: the scenarios whose index is `worker` modulo `workers`. */
import { parentPort, workerData } from 'node:worker_threads';
import { runScenario, scenarioSeed } from './scenario.js';

export interface WorkerResult {
  index: number;
  seed: number;
  violations: string[];
  steps: number;
  simMs: number;
  trace: string | null;
}

const { base, count, worker, workers, trace, verbatimIds } = workerData as {
  verbatimIds: boolean;
  base: number;
  count: number;
  worker: number;
  workers: number;
  trace: boolean;
};
const out: WorkerResult[] = [];
for (let index = worker; index < count; index += workers) {
  const seed = scenarioSeed(base, index);
  const r = await runScenario(seed, { trace, verbatimIds });
  out.push({
    index,
    seed,
    violations: r.violations,
    steps: r.steps,
    simMs: r.simMs,
    trace: r.trace ? `# scenario ${index} seed ${seed}\n${r.trace.join('\n')}\n` : null,
  });
}
parentPort?.postMessage(out);

import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * The tests `npm run test:mutation` (Stryker, stryker.config.json) runs against each mutant:
 * the fast, database-free ones only (unit, the simulation's short run, the model and
 * property tests), in two projects that differ only in their time limit. The simulation
 * runs fewer scenarios than in `npm test` (each mutant runs the tests that reach it).
 */
const src = (p: string): string => fileURLToPath(new URL(`./src/${p}`, import.meta.url));

// MUTATION_TESTS=<globs, comma-separated> narrows the tests (a shorter run over a few modules)
const only = process.env.MUTATION_TESTS?.split(',');
const simulated = ['test/sim/**/*.test.ts', 'test/model/**/*.test.ts'];

export default defineConfig({
  resolve: {
    alias: {
      'pgleaderlock/testing': src('testing/index.ts'),
      'pgleaderlock/node-cron': src('node-cron/index.ts'),
      'pgleaderlock/otel': src('otel/index.ts'),
      pgleaderlock: src('index.ts'),
    },
  },
  test: {
    env: { SIM_TEST_SCENARIOS: process.env.SIM_TEST_SCENARIOS ?? '40' },
    // a unit test on the manual clock hung once for 120 s in a dry run under load: one retry
    retry: 1,
    // one module graph for every test file and every mutant: with isolation each file
    // re-imported the library for each mutant (about 1 s a file under load, 20 s a mutant).
    // Mutants are switched at run time; `ignoreStatic` leaves out those read at import.
    isolate: false,
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: only ?? ['test/unit/**/*.test.ts'],
          exclude: [
            ...configDefaults.exclude,
            ...simulated,
            // these two spawn processes and reach none of the mutated modules
            'test/unit/install-scripts.test.ts',
            'test/unit/demo-os-user.test.ts',
            // a CPU-time bound: instrumented code is slower by design
            'test/unit/assign-cost.test.ts',
            // counts source lines: Stryker's sandbox adds a `// @ts-nocheck` line to each file
            'test/unit/architecture.test.ts',
          ],
          // a mutant that keeps a lock from ever leading fails a test awaiting it here in 2 × 10 s,
          // not at Stryker's own timeout (1.5 × the covering tests' time + timeoutMS + start-up:
          // over a minute under load, then a restart of the runner)
          testTimeout: 10_000,
        },
      },
      {
        extends: true,
        // simulated time: a mutant ends a run with a violation, it does not hang it; the
        // simulation's 40 scenarios took 6 s at a load average of 17, over 10 s at 32
        test: {
          name: 'simulated',
          include: only ?? simulated,
          exclude: [...configDefaults.exclude, 'test/unit/**'],
          testTimeout: 60_000,
        },
      },
    ],
  },
});

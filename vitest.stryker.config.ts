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
// simulated time, and the unit files with a test over 1 s on a quiet machine
const slow = [
  'test/sim/**/*.test.ts',
  'test/model/**/*.test.ts',
  'test/unit/logging.test.ts',
  'test/unit/defects.test.ts',
  'test/unit/partitions-claims.test.ts',
];
// MUTATION_TESTS lists paths or globs: a path under test/sim or test/model, or named in `slow`, runs there
const isSlow = (g: string): boolean => slow.includes(g) || /^test\/(sim|model)\//.test(g);
// an empty include would be vitest's default (every test file): a glob that matches none instead
const pick = (globs: string[]): string[] => (globs.length ? globs : ['test/none/none.test.ts']);

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
          include: only ? pick(only.filter((g) => !isSlow(g))) : ['test/unit/**/*.test.ts'],
          exclude: [
            ...configDefaults.exclude,
            ...slow,
            // these two spawn processes and reach none of the mutated modules
            'test/unit/install-scripts.test.ts',
            'test/unit/demo-os-user.test.ts',
            // a CPU-time bound: instrumented code is slower by design
            'test/unit/assign-cost.test.ts',
            // counts source lines: Stryker's sandbox adds a `// @ts-nocheck` line to each file
            'test/unit/architecture.test.ts',
          ],
          // a mutant that keeps a lock from ever leading fails a test awaiting it here in 2 × 15 s,
          // not at Stryker's own timeout (1.5 × the covering tests' time + timeoutMS + start-up:
          // over a minute under load, then a restart of the runner)
          testTimeout: 15_000,
        },
      },
      {
        extends: true,
        // the simulation's 40 scenarios took 6 s at a load average of 17, over 10 s at 32; the
        // assignment of 4,096 partitions over 512 members over 10 s at 40 (instrumented)
        test: {
          name: 'slow',
          include: only ? pick(only.filter(isSlow)) : slow,
          exclude: configDefaults.exclude,
          testTimeout: 60_000,
        },
      },
    ],
  },
});

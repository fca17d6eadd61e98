import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * The tests `npm run test:mutation` (Stryker, stryker.config.json) runs against each mutant:
 * the fast, database-free ones only (unit, the simulation's short run, the model and
 * property tests), in one flat project. The simulation runs fewer scenarios than in
 * `npm test` (each mutant runs the tests that reach it).
 */
const src = (p: string): string => fileURLToPath(new URL(`./src/${p}`, import.meta.url));

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
    // MUTATION_TESTS=<globs, comma-separated> narrows the tests (a shorter run over a few modules)
    include: process.env.MUTATION_TESTS?.split(',') ?? [
      'test/unit/**/*.test.ts',
      'test/sim/**/*.test.ts',
      'test/model/**/*.test.ts',
    ],
    // these two spawn processes and reach none of the mutated modules
    exclude: [
      ...configDefaults.exclude,
      'test/unit/install-scripts.test.ts',
      'test/unit/demo-os-user.test.ts',
      // a CPU-time bound: instrumented code is slower by design
      'test/unit/assign-cost.test.ts',
    ],
    env: { SIM_TEST_SCENARIOS: process.env.SIM_TEST_SCENARIOS ?? '40' },
    // a unit test on the manual clock hung once for 120 s in a dry run under load: one retry
    testTimeout: 30_000,
    retry: 1,
  },
});

import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import type { TestUserConfig } from 'vitest/node';
import ProjectRankSequencer from './test/harness/sequencer.js';

/**
 * A plain `vitest run` (and so `npm test`) runs the unit, integration and contract
 * projects; `--project <name>` on the command line replaces this filter: `npm run
 * test:cli`, `npm run test:timing`, `npm run test:chaos` and scripts/compat.ts (CI runs them
 * all, docs/testing.md). `project` is a command-line option that vitest also reads from the
 * config, hence the typed spread.
 */
// named, not negated: vitest ORs the entries, and '!compat' alone matches 'chaos'
const byDefault: Pick<TestUserConfig, 'project'> = {
  project: ['unit', 'integration', 'contract', 'sim', 'model'],
};

export default defineConfig({
  resolve: {
    // examples import the package by name, as users do; the subpath first (the first match wins)
    alias: {
      'pgleaderlock/testing': fileURLToPath(new URL('./src/testing/index.ts', import.meta.url)),
      'pgleaderlock/node-cron': fileURLToPath(new URL('./src/node-cron/index.ts', import.meta.url)),
      'pgleaderlock/otel': fileURLToPath(new URL('./src/otel/index.ts', import.meta.url)),
      pgleaderlock: fileURLToPath(new URL('./src/index.ts', import.meta.url)),
    },
  },
  test: {
    // A skipped test is a failed promise: fail the run if anything is left focused.
    allowOnly: false,
    // the bounds audit: every numeric bound's figure recorded (test/harness/record-bounds.ts)
    setupFiles: process.env.PGLEADERLOCK_RECORD_BOUNDS ? ['test/harness/record-bounds.ts'] : [],
    reporters: ['default'],
    // The tests mostly wait on PostgreSQL servers (processes of their own): three files at
    // a time on two cores halves the run (1 worker, vitest's default here: ~3 min; 3: ~1.5)
    // with the timing assertions unchanged. The chaos project still runs alone, last.
    maxWorkers: 3,
    // the projects' files in an order that ends the run sooner (test/harness/sequencer.ts)
    sequence: { sequencer: ProjectRankSequencer },
    experimental: { fsModuleCache: true },
    // scripts/compat.ts runs the integration tests tagged here once per PostgreSQL major or
    // Node.js line (`--tags-filter`): scripts/compat/selection.ts says why, docs/testing.md what
    tags: [
      {
        name: 'pg-major',
        description:
          'touches a server feature that differs between PostgreSQL majors, or is the cheapest sender of one of the library’s statements',
      },
      {
        name: 'node-line',
        description:
          'spawns processes or uses what differs between Node.js lines (`await using`, timers, diagnostics_channel)',
      },
    ],
    ...byDefault,
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          // examples/*.test.ts: users' unit tests built on pgleaderlock/testing (no database)
          include: ['test/unit/**/*.test.ts', 'examples/**/*.test.ts'],
          testTimeout: 5_000,
          // one module registry per worker, not per file: no unit test leans on a fresh copy
          // of a module (they pass in shuffled orders), and importing the sources again for
          // each of the 64 files was two thirds of the project's time (24.7 s → 8.1 s alone)
          isolate: false,
        },
      },
      {
        extends: true,
        test: {
          // the deterministic simulation's short run (test/sim/main.ts, `npm run test:sim`, runs the long one)
          name: 'sim',
          include: ['test/sim/**/*.test.ts'],
          // 1000 scenarios take 10–30 s alone on the 2-core machine; room for a loaded run
          testTimeout: 120_000,
        },
      },
      {
        extends: true,
        test: {
          // fast-check: property tests (assignment, options) and model-based tests of the
          // LeaderLock API on the simulation; seeded (FC_SEED), so a failure replays
          name: 'model',
          include: ['test/model/**/*.test.ts'],
          testTimeout: 60_000,
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          globalSetup: ['test/harness/global-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 30_000,
        },
      },
      {
        extends: true,
        test: {
          // one definition of the behaviours LeaderLock and PartitionedLeadership share, run
          // against each class (test/contract/subjects.ts), against a real PostgreSQL
          name: 'contract',
          include: ['test/contract/**/*.test.ts'],
          // its pooler-refusal test runs a real PgBouncer: installed once if missing
          globalSetup: ['test/harness/global-setup.ts', 'test/harness/pgbouncer-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 30_000,
        },
      },
      {
        extends: true,
        test: {
          // spawns the built CLI (dist/cli.js, rebuilt by the setup) as a user would
          name: 'cli',
          include: ['test/cli/**/*.test.ts'],
          globalSetup: ['test/harness/global-setup.ts', 'test/harness/build-cli.ts'],
          testTimeout: 30_000,
          hookTimeout: 30_000,
        },
      },
      {
        extends: true,
        test: {
          // failover figures checked against tight budgets (the proof of drain), `npm run
          // test:timing`: one file at a time, so that two cores shared with other files do not
          // skew them (CI runs the chaos project beside it: both mostly wait, about 40 % of
          // the 2 cores each; the bounds compare with baselines measured in the same test)
          name: 'timing',
          include: ['test/timing/**/*.test.ts'],
          globalSetup: ['test/harness/global-setup.ts', 'test/harness/build-cli.ts'],
          fileParallelism: false,
          testTimeout: 30_000,
          hookTimeout: 30_000,
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          // `npm run test:chaos` (CI runs it after `npm test`): minutes of faults; it is
          // timing-sensitive and loads both cores, so its files run one at a time
          name: 'chaos',
          include: ['test/chaos/**/*.test.ts'],
          fileParallelism: false, // its files one at a time too
          testTimeout: 120_000,
          sequence: { groupOrder: 2 },
        },
      },
      {
        extends: true,
        test: {
          // real components beyond the default server (PgBouncer, TLS, each PostgreSQL major):
          // run by scripts/compat.ts, never by `npm test`
          name: 'compat',
          include: ['test/compat/**/*.test.ts'],
          globalSetup: [
            'test/harness/global-setup.ts',
            'test/harness/compat-setup.ts',
            'test/harness/build-cli.ts',
          ],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});

import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // examples import the package by name, as users do
    alias: { pgleaderlock: fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
  },
  test: {
    // A skipped test is a failed promise: fail the run if anything is left focused.
    allowOnly: false,
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          testTimeout: 5_000,
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
          // runs alone, after the others: it is timing-sensitive and loads both cores
          name: 'chaos',
          include: ['test/chaos/**/*.test.ts'],
          testTimeout: 120_000,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});

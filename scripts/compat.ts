/**
 * `npm run test:compat`: the compatibility suite. Runs its components (PgBouncer, pgpool-II,
 * TLS, replicated clusters, PostgreSQL 14–18, Node.js 20.19–26) two at a time, prints a
 * markdown table of the outcomes and the failover and settings figures per PostgreSQL
 * major, and exits non-zero if any failed.
 * `npm run test:compat -- pg14 tls` runs only the components whose ids contain those words;
 * `--jobs N` (or `PGLEADERLOCK_COMPAT_JOBS`) how many run at once, beside one more lane for
 * the components that mostly wait (`light`; `--no-light-lane`: none); with one lane in all,
 * one after the other with the output passed through. Pinned builds are fetched once into ~/.cache/pgleaderlock
 * (docs/testing.md).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
// Bun, Deno and the managed-PostgreSQL stand-ins (test/harness/compat-runtimes.ts): registered here, defined there
import { runtimeComponents, standInComponents } from '../test/harness/compat-runtimes.js';
import { ensureTool, PGBOUNCER, PGPOOL } from '../test/harness/debian-binary.js';
import { benchComponent } from './compat/bench.js';
import { buildOnce, builtAlready, CLI_BUILT_ENV, type Component, type Context } from './compat/component.js';
import { components } from './compat/components.js';
import { discardFreshInstall, FRESH_INSTALL_LINE, startFreshInstall } from './compat/node-line.js';
import { packageComponent } from './compat/package.js';
import { failoverTable, failuresList, type Outcome, outcomesTable, settingsTable } from './compat/report.js';
import { interruptRunning } from './compat/vitest.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const jobsArg = args.findIndex((a) => a === '--jobs' || a.startsWith('--jobs='));
const jobsText =
  jobsArg < 0
    ? (process.env.PGLEADERLOCK_COMPAT_JOBS ?? '2')
    : (args[jobsArg]?.split('=')[1] ?? args[jobsArg + 1] ?? '');
if (jobsArg >= 0) args.splice(jobsArg, args[jobsArg]?.includes('=') ? 1 : 2);
const jobs = Number(jobsText);
if (!Number.isInteger(jobs) || jobs < 1) {
  console.error(`--jobs must be a whole number of at least 1, got ${jobsText}`);
  process.exit(2);
}
// the components that mostly wait run one after another in a lane of their own beside the
// others, unless --no-light-lane (Component.light)
const noLightLane = args.indexOf('--no-light-lane');
if (noLightLane >= 0) args.splice(noLightLane, 1);
const wanted = args;
const all = [
  ...components(),
  ...runtimeComponents(),
  ...standInComponents(),
  benchComponent(),
  packageComponent(),
];
const chosen = wanted.length ? all.filter((c) => wanted.some((w) => c.id.includes(w))) : all;
if (chosen.length === 0) {
  console.error(`no component matches ${wanted.join(' ')}; ids: ${all.map((c) => c.id).join(' ')}`);
  process.exit(2);
}

const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
delete env.PGLEADERLOCK_TEST_PG_PACKAGE;
delete env.PGLEADERLOCK_COMPAT_RESULTS;
// dist/ built by the caller from this tree (.ci/run builds once for all its suites): not again
const prebuilt = process.env[CLI_BUILT_ENV] === '1' && fs.existsSync(path.join(root, 'dist', 'index.js'));
if (!prebuilt) delete env[CLI_BUILT_ENV];
// two components side by side, two test files at a time each: four at once on two cores,
// near the three of `npm test` that the suites' timing bounds are set against (three each
// would make six)
const ctx: Context = { root, env, majors: [], maxWorkers: jobs > 1 ? 2 : undefined };
const light = noLightLane < 0 ? chosen.filter((c) => c.light) : [];
const heavy = chosen.filter((c) => !light.includes(c));
/** Components running at once at most: their output then goes to files of their own. */
const lanes = Math.min(jobs, heavy.length) + (light.length ? 1 : 0);

/**
 * What components running side by side would otherwise race for, done once up front: the
 * Debian tools (two apt-get at once fail on dpkg's lock) and dist/ (`npm run build` empties
 * it, while the other components spawn dist/cli.js).
 */
async function prepare(): Promise<void> {
  if (chosen.some((c) => c.compatProject)) {
    for (const tool of [PGBOUNCER, PGPOOL]) {
      try {
        console.log(`[compat] ${tool.label}: ${ensureTool(tool, (line) => console.log(`[compat] ${line}`))}`);
      } catch (err) {
        console.error(`[compat] ${(err as Error).message}`); // its tests fail saying what to install
      }
    }
  }
  if (prebuilt) {
    builtAlready();
    console.log(`[compat] dist/ built by the caller (${CLI_BUILT_ENV}=1): not rebuilt`);
  } else if (chosen.some((c) => c.usesBuild)) {
    const error = await buildOnce(ctx);
    if (error) console.error(`[compat] ${error}: each component builds what it needs itself`);
    else env[CLI_BUILT_ENV] = '1';
  }
}

/** One component, its output in a file of its own when others run beside it, printed whole at its end. */
async function runOne(c: Component): Promise<Outcome> {
  const t0 = Date.now();
  const logDir = lanes > 1 ? fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-compat-log-')) : null;
  const logFile = logDir ? path.join(logDir, 'output.log') : null;
  const out = logFile ? fs.openSync(logFile, 'w') : undefined;
  console.log(lanes > 1 ? `[compat] ${c.id}: started` : `\n[compat] ── ${c.id} ──`);
  let outcome: Outcome;
  try {
    outcome = { ...(await c.run({ ...ctx, out })), ms: Date.now() - t0 };
  } catch (err) {
    outcome = { component: c.id, ok: false, passed: 0, total: 0, ms: Date.now() - t0, note: String(err) };
  } finally {
    if (out !== undefined) fs.closeSync(out);
  }
  if (logFile && logDir) {
    console.log(`\n[compat] ── ${c.id} ──`);
    process.stdout.write(fs.readFileSync(logFile));
    fs.rmSync(logDir, { recursive: true, force: true });
  }
  console.log(
    `[compat] ${outcome.component}: ${outcome.ok ? 'pass' : 'FAIL'} (${outcome.passed}/${outcome.total}, ${Math.round(outcome.ms / 1000)} s)`,
  );
  return outcome;
}

// Ctrl-C or a CI timeout: pass the signal to the running suites (which stop their servers),
// run no further component, and report what ran
let interrupted: NodeJS.Signals | null = null;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    interrupted = signal;
    interruptRunning(signal);
  });
}

const started = Date.now();
await prepare();
// `jobs` lanes each take the longest component not started yet as they free up, and one more
// lane the light ones (a heavy lane with nothing left takes light ones too); the table keeps
// the list's order
const longestFirst = (list: Component[]): Component[] => [...list].sort((a, b) => b.seconds - a.seconds);
const heavyQueue = longestFirst(heavy);
const lightQueue = longestFirst(light);
const results = new Map<Component, Outcome>();
async function lane(queues: Component[][], first?: () => Promise<void>): Promise<void> {
  await first?.();
  const next = (): Component | undefined => queues.find((q) => q.length)?.shift();
  for (let c = next(); c && !interrupted; c = next()) results.set(c, await runOne(c));
}
// the fresh npm 12 install of one Node.js line mostly waits (disk, registry): the light lane
// does it first, and the line (heavy) takes it when its turn comes (startFreshInstall)
const freshLine = `node${FRESH_INSTALL_LINE.split('.')[0]}`;
const installAhead =
  lightQueue.length && heavyQueue.some((c) => c.id === freshLine) ? () => startFreshInstall(ctx) : undefined;
try {
  await Promise.all([
    ...Array.from({ length: Math.min(jobs, heavyQueue.length) }, () => lane([heavyQueue, lightQueue])),
    ...(lightQueue.length ? [lane([lightQueue], installAhead)] : []),
  ]);
} finally {
  await discardFreshInstall();
}
const outcomes = chosen.flatMap((c) => {
  const o = results.get(c);
  return o ? [o] : [];
});
ctx.majors.sort((a, b) => a.major.localeCompare(b.major, 'en', { numeric: true }));

const failures = outcomes.filter((o) => !o.ok);
const sections = [
  `## Compatibility suite (${Math.round((Date.now() - started) / 1000)} s, ${jobs} at a time${light.length ? ', the light ones in a lane of their own beside' : ''}, node ${process.version}, ${new Date().toISOString()})`,
  outcomesTable(outcomes),
];
if (ctx.majors.length) {
  sections.push(
    '### Wait-mode failover per PostgreSQL major (ms)',
    failoverTable(ctx.majors),
    '### What each major applies on a leader session (healthIntervalMs 200, queryTimeoutMs 500)',
    settingsTable(ctx.majors),
  );
}
sections.push(
  failures.length
    ? `**${failures.length} of ${outcomes.length} components failed:**\n\n${failuresList(outcomes)}`
    : `All ${outcomes.length} components passed.`,
);
if (interrupted)
  sections.push(`Interrupted (${interrupted}) after ${outcomes.length} of ${chosen.length} components.`);
console.log(`\n${sections.join('\n\n')}`);
process.exitCode = interrupted ? 130 : failures.length ? 1 : 0;

/**
 * `npm run test:compat`: the compatibility suite. Runs each component in turn (PgBouncer,
 * TLS, PostgreSQL 14–18, Node.js 20.19–26), prints a markdown table of the outcomes and the
 * failover and settings figures per PostgreSQL major, and exits non-zero if any failed.
 * `npm run test:compat -- pg14 tls` runs only the components whose ids contain those words.
 * Pinned builds are fetched once into ~/.cache/pgleaderlock (docs/testing.md).
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
// Bun, Deno and the managed-PostgreSQL stand-ins (test/harness/compat-runtimes.ts): registered here, defined there
import { runtimeComponents, standInComponents } from '../test/harness/compat-runtimes.js';
import { type Component, type Context, components } from './compat/components.js';
import { failoverTable, failuresList, type Outcome, outcomesTable, settingsTable } from './compat/report.js';
import { interruptCurrent } from './compat/vitest.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const wanted = process.argv.slice(2);
const all = [...components(), ...runtimeComponents(), ...standInComponents()];
const chosen = wanted.length ? all.filter((c) => wanted.some((w) => c.id.includes(w))) : all;
if (chosen.length === 0) {
  console.error(`no component matches ${wanted.join(' ')}; ids: ${all.map((c) => c.id).join(' ')}`);
  process.exit(2);
}

const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
delete env.PGLEADERLOCK_TEST_PG_PACKAGE;
delete env.PGLEADERLOCK_COMPAT_RESULTS;
const ctx: Context = { root, env, majors: [] };

async function runOne(c: Component): Promise<Outcome> {
  console.log(`\n[compat] ── ${c.id} ──`);
  const t0 = Date.now();
  try {
    return { ...(await c.run(ctx)), ms: Date.now() - t0 };
  } catch (err) {
    return { component: c.id, ok: false, passed: 0, total: 0, ms: Date.now() - t0, note: String(err) };
  }
}

// Ctrl-C or a CI timeout: pass the signal to the running suite (which stops its servers),
// run no further component, and report what ran
let interrupted: NodeJS.Signals | null = null;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    interrupted = signal;
    interruptCurrent(signal);
  });
}

const started = Date.now();
const outcomes: Outcome[] = [];
for (const c of chosen) {
  if (interrupted) break;
  const outcome = await runOne(c);
  outcomes.push(outcome);
  console.log(
    `[compat] ${outcome.component}: ${outcome.ok ? 'pass' : 'FAIL'} (${outcome.passed}/${outcome.total})`,
  );
}

const failures = outcomes.filter((o) => !o.ok);
const sections = [
  `## Compatibility suite (${Math.round((Date.now() - started) / 1000)} s, node ${process.version}, ${new Date().toISOString()})`,
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

// `npm test`: the type check (scripts/typecheck.mjs) and the lint (`biome check`) beside the
// test run (`vitest run`, its output passed through), not before it: the 2 cores idle about a
// fifth of vitest's run (its files mostly wait on servers), and the checks took 24 s of
// `npm test`'s 201 s one after the other (clean-clone CI run AI, 2026-12-03). Each check's
// output is printed whole when it ends; if one fails the run exits 1 once the tests end.
// The tests are not stopped early: vitest's main process ends 1 ms after a signal, and its
// workers, unless signalled too, run their files to the end, orphaned. Extra arguments go to vitest
// (`npm test -- test/unit`).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
// its bin (the package exports no path to it)
const vitestBin = path.join(path.dirname(require.resolve('vitest/package.json')), 'vitest.mjs');
const biomeBin = require.resolve('@biomejs/biome/bin/biome');

const children = new Set();

/** Run a check with its output held back; resolves with its exit code once its output is printed. */
function check(label, args) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    const out = [];
    child.stdout.on('data', (c) => out.push(c));
    child.stderr.on('data', (c) => out.push(c));
    child.once('error', (err) => {
      out.push(Buffer.from(`${err.message}\n`));
      resolve(1);
    });
    child.once('close', (code) => {
      children.delete(child);
      const text = Buffer.concat(out).toString().trimEnd();
      process.stdout.write(
        `\n[npm test] ${label}: ${code === 0 ? 'ok' : `exit ${code}`}\n${text ? `${text}\n` : ''}`,
      );
      resolve(code ?? 1);
    });
  });
}

// a process group of its own (its workers too), so that a signal reaches all of them
const tests = spawn(process.execPath, [vitestBin, 'run', ...process.argv.slice(2)], {
  stdio: ['ignore', 'inherit', 'inherit'],
  detached: true,
});
const testsDone = new Promise((resolve) => {
  tests.once('error', (err) => {
    console.error(`[npm test] vitest did not start: ${err.message}`);
    resolve(1);
  });
  tests.once('close', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
});
// a Ctrl-C or a SIGTERM: passed on to the tests' process group (vitest's main process stops
// its servers: test/harness/global-setup.ts) and the checks, then this exits as the signal asks
let interrupted = null;
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
]) {
  process.on(signal, () => {
    if (interrupted !== null) return;
    interrupted = code;
    try {
      if (tests.pid) process.kill(-tests.pid, signal);
    } catch {
      // already ended
    }
    for (const child of children) child.kill(signal);
  });
}

const checks = await Promise.all([
  check('tsc --noEmit (scripts/typecheck.mjs)', ['scripts/typecheck.mjs']),
  check('biome check --error-on-warnings', [biomeBin, 'check', '--error-on-warnings', '.']),
]);
const checksFailed = checks.some((c) => c !== 0);
if (checksFailed && interrupted === null && tests.exitCode === null) {
  console.error('[npm test] a check failed: the run will exit 1 (the tests go on to their end)');
}
const testsCode = await testsDone;
process.exitCode = interrupted ?? (checksFailed || testsCode !== 0 ? 1 : 0);

/**
 * `node --import ./scripts/compat/record-statements.mjs`: with PGLEADERLOCK_RECORD_STATEMENTS
 * naming a folder, every statement the library sends through a `pg.Client` (its text starts
 * with `/* pgleaderlock:<name> *\/`) is appended there, literals replaced, one file per
 * process. scripts/compat/statements.ts uses it to check the per-major selection. With
 * PGLEADERLOCK_RECORD_TESTS=1 each line also names the test that sent it (`<file> > <test>`
 * after a tab; `-` outside a vitest test: a hook, a forked child), to choose which tests to
 * tag (scripts/compat/statements.ts --by-test).
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const dir = process.env.PGLEADERLOCK_RECORD_STATEMENTS;
let pg = null;
try {
  pg = createRequire(path.join(process.cwd(), 'package.json'))('pg');
} catch {
  // a process that has no pg: nothing to record
}

/** Literals, channel names and priorities out: the statement as the server parses it. */
export function normalize(text) {
  return text
    .replace(/'(?:[^']|'')*'/g, "'?'")
    .replace(/"(?:[^"]|"")*"/g, '"?"')
    .replace(/\bpgleaderlock_[0-9a-z_]+/g, 'pgleaderlock_X')
    .replace(/(?<![a-z_])-?\d+(\.\d+)?/g, 'N')
    .replace(/(N|\$N|'\?')(\s*,\s*(N|\$N|'\?'))+/g, '$1,...')
    .replace(/\s+/g, ' ')
    .trim();
}

/** The vitest test running now in this process (its worker state's current task), else '-'. */
function currentTest() {
  const task = globalThis.__vitest_worker__?.current;
  if (task?.type !== 'test') return '-';
  const names = [];
  for (let t = task; t && !t.filepath; t = t.suite) names.unshift(t.name);
  return `${path.relative(process.cwd(), task.file?.filepath ?? '?')} > ${names.join(' > ')}`;
}

if (dir && pg) {
  const file = path.join(dir, `statements-${process.pid}.txt`);
  const seen = new Set();
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (config, ...rest) {
    const text = typeof config === 'string' ? config : config?.text;
    if (typeof text === 'string' && text.startsWith('/* pgleaderlock:')) {
      const line = process.env.PGLEADERLOCK_RECORD_TESTS
        ? `${normalize(text)}\t${currentTest()}`
        : normalize(text);
      if (!seen.has(line)) {
        seen.add(line);
        fs.appendFileSync(file, `${line}\n`);
      }
    }
    return query.call(this, config, ...rest);
  };
}

/**
 * `npx tsx scripts/compat/statements.ts`: checks that the per-major selection
 * (scripts/compat/selection.ts) sends every statement the library sends in the whole
 * integration and contract projects (docs/testing.md, "Compatibility suite"). Runs both with
 * scripts/compat/record-statements.mjs and prints what the selection misses; exits 1 if
 * anything. About as long as the two runs (several minutes); not part of CI.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MAJOR_TAG, PER_MAJOR } from './selection.js';
import { runVitest } from './vitest.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const hook = path.join(root, 'scripts/compat/record-statements.mjs');

async function record(args: string[], tagsFilter?: string): Promise<Set<string>> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-statements-'));
  try {
    const env = {
      ...process.env,
      NO_COLOR: '1',
      PGLEADERLOCK_RECORD_STATEMENTS: dir,
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import ${hook}`.trim(),
    };
    const r = await runVitest({ root, node: process.execPath, args, env, tagsFilter });
    if (!r.ok)
      console.warn(`[statements] ${args.join(' ')}: ${r.note ?? 'failed'} (a failed test may send fewer)`);
    const lines = fs.readdirSync(dir).flatMap((f) => fs.readFileSync(path.join(dir, f), 'utf8').split('\n'));
    return new Set(lines.filter(Boolean));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const all = await record(['--project', 'integration', '--project', 'contract']);
const selected = await record(['--project', 'integration', ...PER_MAJOR.map((p) => p.file)], MAJOR_TAG);
const missed = [...all].filter((s) => !selected.has(s));
console.log(
  `[statements] ${all.size} distinct statements in the whole run, ${all.size - missed.length} sent by the selection`,
);
for (const s of missed) console.log(`  missed: ${s.slice(0, 200)}`);
process.exitCode = missed.length ? 1 : 0;

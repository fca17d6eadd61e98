/**
 * docs/testing.md, "Absolute bounds and the worst figure recorded" (issue 37, part 2): every
 * absolute wall-clock bound in an audited test file is linked by `// bound: <id>` to a row
 * giving the worst figure recorded for it, and is at least 3 × that figure.
 * `scripts/timing-inventory.mjs --check` is the check; this runs it on the repository, and on
 * small trees of its own to show that each way of breaking the rule fails it.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '../..');
const script = path.join(root, 'scripts/timing-inventory.mjs');

function check(args: string[] = []): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [script, '--counts', '--check', ...args], {
    cwd: root,
    encoding: 'utf8',
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

/** A tree with one audited file (test/contract/contract.test.ts) holding `body`, and `docs`. */
function tree(body: string, docs: string): string[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'timing-inventory-'));
  dirs.push(dir);
  fs.mkdirSync(path.join(dir, 'test/contract'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'test/contract/contract.test.ts'), body);
  fs.writeFileSync(path.join(dir, 'testing.md'), docs);
  return ['--root', path.join(dir, 'test'), '--docs', path.join(dir, 'testing.md')];
}

const BODY = `const LIMIT_MS = 50;
it('x', () => {
  const took = 1;
  // bound: contract/x
  expect(took).toBeLessThan(LIMIT_MS * 2);
});
`;
const row = (bound: string, worst: string) =>
  `| id | test | bound (ms) | worst figure (ms) | where |\n| --- | --- | --- | --- | --- |\n| \`contract/x\` | x | ${bound} | ${worst} | here |\n`;

describe('timing inventory --check', { timeout: 30_000 }, () => {
  it('passes on the repository: every absolute bound of the audited files is linked at ≥ 3 × its figure', () => {
    const r = check();
    expect(r.out).toMatch(/0 failing in audited files/);
    expect(r.status, r.out).toBe(0);
  });

  it('passes a linked bound at 3 × its worst figure (100 ms, 33.3 recorded)', () => {
    const r = check(tree(BODY, row('100', '33.3')));
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/1 linked/);
  });

  it('fails a bound below 3 × the worst figure recorded (100 ms, 40 recorded)', () => {
    const r = check(tree(BODY, row('100', '40')));
    expect(r.status, r.out).toBe(1);
    expect(r.out).toMatch(/FAIL .*contract\.test\.ts:5 .*2\.50 × the worst figure 40 ms/);
  });

  it('fails a bound with no marker, and a marker with no row', () => {
    const unmarked = check(tree(BODY.replace('// bound: contract/x\n', ''), row('100', '10')));
    expect(unmarked.status, unmarked.out).toBe(1);
    expect(unmarked.out).toMatch(/no `\/\/ bound: <id>` marker/);
    const rowless = check(tree(BODY, row('100', '10').replace('contract/x', 'contract/y')));
    expect(rowless.status, rowless.out).toBe(1);
    expect(rowless.out).toMatch(/no row `contract\/x`/);
  });

  it('fails a row whose bound is not the code’s (the docs say 400, the code 100)', () => {
    const r = check(tree(BODY, row('400', '10')));
    expect(r.status, r.out).toBe(1);
    expect(r.out).toMatch(/the code's bound is 100 ms, the row `contract\/x` says 400/);
  });

  it('passes a rule’s time plus a margin at ≥ 3 × the worst excess (rule 60 + 40, 73 recorded: 13 over)', () => {
    const r = check(tree(BODY, row('100 (rule 60 + 40)', '73')));
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/1 linked .*\(1 of them a rule's time/);
  });

  it('fails a rule’s time plus a margin below 3 × the worst excess (rule 60 + 40, 75 recorded: 15 over)', () => {
    const r = check(tree(BODY, row('100 (rule 60 + 40)', '75')));
    expect(r.status, r.out).toBe(1);
    expect(r.out).toMatch(
      /FAIL .*a margin of 40 ms over the rule's 60 ms is 2\.67 × the worst excess 15\.0 ms/,
    );
  });
});

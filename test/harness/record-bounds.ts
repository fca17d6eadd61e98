/**
 * A setup file for the bounds audit (issue 37 part 2, docs/testing.md "Absolute bounds and the
 * worst figure recorded"): with PGLEADERLOCK_RECORD_BOUNDS=<file> set, vitest.config.ts loads it
 * in every project, and every `toBeLessThan(OrEqual)` / `toBeGreaterThan(OrEqual)` on a number
 * appends `{ at: "file:line", actual, bound, matcher, rev }` to that file, one JSON object per line,
 * before the matcher runs as usual. `node scripts/bounds-report.mjs <file>` gives the worst figure
 * per assertion. Without the variable nothing is loaded.
 */
import { execSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { chai } from 'vitest';

const file = process.env.PGLEADERLOCK_RECORD_BOUNDS;
/** The commit the lines belong to (scripts/bounds-report.mjs warns when it is not HEAD). */
const rev = file ? execSync('git rev-parse HEAD', { encoding: 'utf8' }).trim() : '';
const MATCHERS = ['toBeLessThan', 'toBeLessThanOrEqual', 'toBeGreaterThan', 'toBeGreaterThanOrEqual'];

/** The first stack frame in a test file (not this one, not vitest's). */
function caller(): string | null {
  for (const line of (new Error().stack ?? '').split('\n').slice(2)) {
    const m = /([^\s()]+\.test\.ts):(\d+)/.exec(line);
    const rel = m ? path.relative(process.cwd(), m[1]?.replace(/^file:\/\//, '') ?? '') : '';
    if (m && rel.startsWith('test/')) return `${rel}:${m[2]}`;
  }
  return null;
}

if (file) {
  chai.use((_chai, utils) => {
    for (const name of MATCHERS) {
      utils.overwriteMethod(
        chai.Assertion.prototype,
        name,
        (original: (...args: unknown[]) => unknown) =>
          function (this: object, ...args: unknown[]) {
            const actual = utils.flag(this, 'object') as unknown;
            const at = caller();
            if (at && typeof actual === 'number' && typeof args[0] === 'number') {
              fs.appendFileSync(
                file,
                `${JSON.stringify({ at, actual, bound: args[0], matcher: name, rev })}\n`,
              );
            }
            return original.apply(this, args);
          },
      );
    }
  });
}

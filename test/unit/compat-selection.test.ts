/**
 * scripts/compat/selection.ts: the integration files the compatibility suite runs per
 * PostgreSQL major and per Node.js line. Each entry is passed to vitest as a filter (a
 * substring of the path): it must name exactly one integration file, once, with a reason,
 * so that a renamed or deleted file fails here instead of silently dropping out of a
 * component; the files holding tests with a list's tag (`--tags-filter`) are exactly that
 * list's, so that a tagged test in an unlisted file is not silently left out; and
 * docs/testing.md's counts must be the lists' own.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAJOR_TAG, NODE_TAG, PER_MAJOR, PER_NODE } from '../../scripts/compat/selection.js';

const root = path.resolve(import.meta.dirname, '../..');
const integration = fs
  .readdirSync(path.join(root, 'test/integration'))
  .filter((f) => f.endsWith('.test.ts'))
  .map((f) => `test/integration/${f}`);

describe.each([
  ['PER_MAJOR', PER_MAJOR, MAJOR_TAG],
  ['PER_NODE', PER_NODE, NODE_TAG],
] as const)('%s', (_name, picks, tag) => {
  it('each entry, as a vitest filter, matches exactly one integration file, its own, and says why', () => {
    for (const { file, why } of picks) {
      expect(
        integration.filter((f) => path.join(root, f).includes(file)),
        file,
      ).toEqual([file]);
      expect(why.length, file).toBeGreaterThan(10);
    }
  });

  it(`lists exactly the integration files that tag a test or suite '${tag}'`, () => {
    const tagging = integration.filter((f) =>
      new RegExp(`tags: [^\\n]*'${tag}'`).test(fs.readFileSync(path.join(root, f), 'utf8')),
    );
    expect([...picks.map((p) => p.file)].sort()).toEqual(tagging.sort());
  });

  it('names no file twice', () => {
    const files = picks.map((p) => p.file);
    expect(files.filter((f, i) => files.indexOf(f) !== i)).toEqual([]);
  });
});

it('docs/testing.md gives the lists’ sizes', () => {
  const doc = fs.readFileSync(path.join(root, 'docs/testing.md'), 'utf8');
  expect(doc).toContain(`${PER_MAJOR.length} of the ${integration.length} integration files`);
  expect(doc).toContain(`the ${PER_NODE.length} integration files that`);
});

/**
 * scripts/compat/selection.ts: the integration files the compatibility suite runs per
 * PostgreSQL major and per Node.js line. Each entry is passed to vitest as a filter (a
 * substring of the path): it must name exactly one integration file, once, with a reason,
 * so that a renamed or deleted file fails here instead of silently dropping out of a
 * component; and docs/testing.md's counts must be the lists' own.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PER_MAJOR, PER_NODE } from '../../scripts/compat/selection.js';

const root = path.resolve(import.meta.dirname, '../..');
const integration = fs
  .readdirSync(path.join(root, 'test/integration'))
  .filter((f) => f.endsWith('.test.ts'))
  .map((f) => `test/integration/${f}`);

describe.each([
  ['PER_MAJOR', PER_MAJOR],
  ['PER_NODE', PER_NODE],
] as const)('%s', (_name, picks) => {
  it('each entry, as a vitest filter, matches exactly one integration file, its own, and says why', () => {
    for (const { file, why } of picks) {
      expect(
        integration.filter((f) => path.join(root, f).includes(file)),
        file,
      ).toEqual([file]);
      expect(why.length, file).toBeGreaterThan(10);
    }
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

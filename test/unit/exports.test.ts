/**
 * Every error class that can reach a user is exported from the package's entry point (so
 * `instanceof` and the classes' docs are available): each `export class X extends …Error`
 * under src/ (the CLI's own aside) must be an export of src/index.ts, the very class.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import * as api from '../../src/index.js';

const SRC = path.resolve(import.meta.dirname, '../../src');

function errorClasses(): { file: string; name: string }[] {
  const found: { file: string; name: string }[] = [];
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (full !== path.join(SRC, 'cli')) walk(full);
      } else if (entry.name.endsWith('.ts')) {
        const text = fs.readFileSync(full, 'utf8');
        for (const m of text.matchAll(/^export class (\w+) extends (\w+)/gm)) {
          if (/Error$/.test(m[2] as string))
            found.push({ file: path.relative(SRC, full), name: m[1] as string });
        }
      }
    }
  };
  walk(SRC);
  return found;
}

describe('error classes', () => {
  const classes = errorClasses();
  it('finds the classes (the scan works)', () => {
    expect(classes.map((c) => c.name)).toEqual(
      expect.arrayContaining([
        'ConnectionError',
        'LockError',
        'NoPrimaryError',
        'FencedError',
        'TermEndedError',
      ]),
    );
  });

  it.each(classes.map((c) => [c.name, c.file] as const))(
    '%s (%s) is exported from the entry point, and names itself',
    async (name, file) => {
      const mod = (await import(path.join(SRC, file.replace(/\.ts$/, '.js')))) as Record<string, unknown>;
      expect((api as Record<string, unknown>)[name]).toBe(mod[name]);
      const cls = mod[name] as { prototype: object };
      if (cls !== api.PgLeaderLockError) expect(cls.prototype).toBeInstanceOf(api.PgLeaderLockError);
      const source = fs.readFileSync(path.join(SRC, file), 'utf8');
      expect(source).toMatch(
        new RegExp(`class ${name} extends[^{]*\\{\\s*(/\\*\\*[\\s\\S]*?\\*/\\s*)?override name = '${name}'`),
      );
    },
  );

  it('NoPrimaryError: code ERR_PGLEADERLOCK_NO_PRIMARY, a LockError; its standby connections are not enumerable (a serializer never walks into them)', () => {
    const closed: string[] = [];
    const err = new api.NoPrimaryError('no primary', { close: () => closed.push('x') } as never);
    expect(err).toBeInstanceOf(api.LockError);
    expect([err.name, err.code]).toEqual(['NoPrimaryError', 'ERR_PGLEADERLOCK_NO_PRIMARY']);
    expect(Object.keys(err)).not.toContain('standbys');
    expect(JSON.stringify(err)).not.toContain('standbys');
  });
});

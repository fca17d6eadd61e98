/**
 * `npm run docs:api`: the HTML API reference (TypeDoc, options in typedoc.json, output in
 * api-docs/, git-ignored). Its entry points are the sources of the package's `exports`: each
 * subpath's `./dist/<name>.js` is tsup's entry `<name>` (tsup.config.ts), so a subpath added
 * to package.json is documented without editing this file, and one without a tsup entry
 * fails here. Warnings are errors: an export without TSDoc fails the run (typedoc.json).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import tsupConfig from '../tsup.config.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

type ExportTarget = string | { [condition: string]: ExportTarget };

/** The first `.js` file an export condition tree points at (`import.default` first). */
function jsTarget(target: ExportTarget): string | null {
  if (typeof target === 'string') return target.endsWith('.js') ? target : null;
  for (const key of ['import', 'default', ...Object.keys(target)]) {
    const next = target[key];
    const found = next === undefined ? null : jsTarget(next);
    if (found) return found;
  }
  return null;
}

/** tsup's entries, name (the output path under dist/, without extension) to source file. */
function tsupEntries(): Map<string, string> {
  const configs = Array.isArray(tsupConfig) ? tsupConfig : [tsupConfig];
  const entries = new Map<string, string>();
  for (const config of configs) {
    if (typeof config !== 'object' || config === null) continue;
    const entry = (config as { entry?: unknown }).entry;
    if (Array.isArray(entry)) {
      for (const file of entry as string[])
        entries.set(path.basename(file).replace(/\.[cm]?tsx?$/, ''), file);
    } else if (typeof entry === 'object' && entry !== null) {
      for (const [name, file] of Object.entries(entry as Record<string, string>)) entries.set(name, file);
    }
  }
  return entries;
}

/** The source file behind each subpath of package.json's `exports`. */
export function apiEntryPoints(): string[] {
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as {
    exports: Record<string, ExportTarget>;
  };
  const entries = tsupEntries();
  const sources: string[] = [];
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (subpath === './package.json') continue;
    const js = jsTarget(target);
    const name = js?.replace(/^\.\/dist\//, '').replace(/\.js$/, '');
    const source = name === undefined ? undefined : entries.get(name);
    if (!source) {
      throw new Error(`package.json exports ${subpath} (${js ?? 'no .js file'}): no tsup entry builds it`);
    }
    if (!sources.includes(source)) sources.push(source);
  }
  return sources;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const entryPoints = apiEntryPoints();
  console.log(`docs:api: entry points ${entryPoints.join(', ')}`);
  const typedoc = path.join(
    path.dirname(createRequire(import.meta.url).resolve('typedoc/package.json')),
    'bin',
    'typedoc',
  );
  const args = ['--options', 'typedoc.json', ...entryPoints.flatMap((e) => ['--entryPoints', e])];
  const result = spawnSync(process.execPath, [typedoc, ...args, ...process.argv.slice(2)], {
    cwd: root,
    stdio: 'inherit',
  });
  process.exitCode = result.status ?? 1;
}

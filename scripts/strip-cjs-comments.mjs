// After tsup: the CommonJS copy of the library without its doc comments. The ESM build (the
// one most users load, and the one the CLI runs) keeps them, and the .d.ts/.d.cts keep every
// public doc comment for editors; the CommonJS code stays unminified and readable. esbuild
// keeps the comments on class members in both copies, about 48 kB each (check:package holds
// the package at 400 kB packed).
// Only whole-line `/** … */` blocks are removed, and only when the file's syntax tree,
// printed without comments, is the same before and after (so nothing but comments went).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const dist = path.join(import.meta.dirname, '..', 'dist');
const printer = ts.createPrinter({ removeComments: true });
const shape = (file, text) =>
  printer.printFile(ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.JS));

let saved = 0;
for (const name of readdirSync(dist).filter((n) => n.endsWith('.cjs'))) {
  const file = path.join(dist, name);
  const before = readFileSync(file, 'utf8');
  const out = [];
  let inBlock = false;
  for (const line of before.split('\n')) {
    const t = line.trim();
    if (!inBlock && t.startsWith('/**')) inBlock = !t.endsWith('*/');
    else if (inBlock) inBlock = !t.endsWith('*/');
    else out.push(line);
  }
  const after = out.join('\n');
  if (shape(file, before) !== shape(file, after)) {
    console.error(`strip-cjs-comments: ${name} would change beyond its comments; left as built`);
    process.exit(1);
  }
  writeFileSync(file, after);
  saved += before.length - after.length;
}
console.log(
  `strip-cjs-comments: ${(saved / 1000).toFixed(1)} kB of doc comments left out of the CommonJS copy`,
);

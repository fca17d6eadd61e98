// `npm run typecheck`: the library and tests, the NestJS example and the other examples, the
// three `tsc --noEmit` runs at once; each one's output printed whole when it ends, exit 1 if
// any fails. The checker is TypeScript 7 (the native compiler, the devDependency
// `typescript-7`): 3.0, 0.8 and 0.9 s one after another on the 2-core machine, against 15.5,
// 5 and 5 s with TypeScript 5.9 (2026-12-03), with the same result on this tree. TypeScript
// 5.9 stays the `typescript` package: tsup's declaration build, TypeDoc and attw need its
// JavaScript API, which 7 does not have. Both declare a `tsc` bin, so `npx tsc` may run
// either (use `npm run typecheck`); this script names 7's. 7's compiler is a native binary
// from an optional dependency (`@typescript/typescript-<platform>-<arch>`): an install with
// `--omit=optional` has none.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';

const tsc = path.join(
  path.dirname(createRequire(import.meta.url).resolve('typescript-7/package.json')),
  'bin/tsc',
);
const projects = [[], ['-p', 'examples/nestjs'], ['-p', 'tsconfig.examples.json']];
const children = new Set();
// stopped (Ctrl-C, a CI timeout): the tsc runs stop too, not run on orphaned
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
]) {
  process.on(signal, () => {
    for (const child of children) child.kill(signal);
    process.exit(code);
  });
}
const codes = await Promise.all(
  projects.map(
    (args) =>
      new Promise((resolve) => {
        const child = spawn(process.execPath, [tsc, '--noEmit', ...args], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        children.add(child);
        const out = [];
        child.stdout.on('data', (c) => out.push(c));
        child.stderr.on('data', (c) => out.push(c));
        child.on('error', (err) => {
          out.push(Buffer.from(`${err.message}\n`));
          resolve(1);
        });
        child.on('close', (code) => {
          children.delete(child);
          process.stdout.write(Buffer.concat(out));
          if (code !== 0) console.error(`tsc --noEmit ${args.join(' ')}: exit ${code}`);
          resolve(code ?? 1);
        });
      }),
  ),
);
process.exitCode = codes.every((c) => c === 0) ? 0 : 1;

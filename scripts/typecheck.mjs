// `npm run typecheck`: the library and tests, the NestJS example and the other examples, the
// three `tsc --noEmit` runs at once (16, 5 and 5 s one after another on the 2-core machine,
// 2026-12-03); each one's output printed whole when it ends, exit 1 if any fails.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
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

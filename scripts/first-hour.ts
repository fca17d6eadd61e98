/**
 * A new user's first minutes, from the packed package (`npm run check:first-hour`, after a
 * build; CI runs it): pack the package, install the tarball into an empty project, save the
 * README's example as `leader.mjs` exactly as printed there, and run it twice against a
 * real PostgreSQL as the README says: one leads; Ctrl-C (SIGINT) it and the other leads;
 * SIGTERM that one; both exit 0. Fails if any step fails, or if it all takes five minutes
 * or more.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startPgServer } from '../test/harness/pg-server.js';

const BUDGET_MS = 5 * 60_000;
const root = path.resolve(import.meta.dirname, '..');
const started = Date.now();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-first-hour-'));
const npm = (args: string[], cwd: string): string =>
  execFileSync('npm', args, { cwd, stdio: ['ignore', 'pipe', 'inherit'] }).toString();

/** The README's first `js` block, which it tells the reader to save as leader.mjs. */
function readmeExample(): string {
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
  const m = /Save this as `leader\.mjs`[^\n]*\n\n```js\n([\s\S]*?)```/.exec(readme);
  if (!m?.[1]) throw new Error('README.md has no ```js block after "Save this as `leader.mjs`"');
  const file = fs.readFileSync(path.join(root, 'examples/quickstart.mjs'), 'utf8');
  if (m[1] !== file) throw new Error('the README example differs from examples/quickstart.mjs');
  return m[1];
}

interface Replica {
  proc: ChildProcess;
  out: string[];
  exited: Promise<number | null>;
}

function replica(cwd: string, url: string): Replica {
  const proc = spawn(process.execPath, ['leader.mjs'], {
    cwd,
    env: { ...process.env, DATABASE_URL: url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out: string[] = [];
  for (const s of [proc.stdout, proc.stderr])
    s?.on('data', (b: Buffer) => out.push(...b.toString().split('\n')));
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  return { proc, out, exited };
}

async function until(what: string, ok: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`no ${what} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const server = await startPgServer();
const replicas: Replica[] = [];
try {
  const example = readmeExample();
  const tarball = npm(['pack', '--silent', '--pack-destination', tmp], root).trim().split('\n').at(-1) ?? '';
  const project = path.join(tmp, 'project');
  fs.mkdirSync(project);
  fs.writeFileSync(
    path.join(project, 'package.json'),
    '{"name":"first-hour","version":"1.0.0","private":true}\n',
  );
  npm(['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(tmp, tarball)], project);
  fs.writeFileSync(path.join(project, 'leader.mjs'), example);
  console.log(`first-hour: installed the tarball and saved the README example (${Date.now() - started} ms)`);

  const a = replica(project, server.url);
  replicas.push(a);
  await until('"leading (term 1)" from the first replica', () => a.out.includes('leading (term 1)'));
  const b = replica(project, server.url);
  replicas.push(b);
  await new Promise((r) => setTimeout(r, 1000));
  if (b.out.some((l) => l.startsWith('leading'))) throw new Error(`both lead:\n${b.out.join('\n')}`);
  a.proc.kill('SIGINT'); // Ctrl-C
  await until('"leading (term 1)" from the second replica', () => b.out.includes('leading (term 1)'));
  if ((await a.exited) !== 0)
    throw new Error(`the first replica exited ${a.proc.exitCode}:\n${a.out.join('\n')}`);
  if (!a.out.includes('no longer leading'))
    throw new Error(`the first replica's work did not stop:\n${a.out.join('\n')}`);
  b.proc.kill('SIGTERM');
  if ((await b.exited) !== 0)
    throw new Error(`the second replica exited ${b.proc.exitCode}:\n${b.out.join('\n')}`);
  const took = Date.now() - started;
  console.log(
    `first-hour: README example ran twice from the packed package: one led, Ctrl-C, the other led, SIGTERM, both exited 0; ${(took / 1000).toFixed(1)} s in all`,
  );
  if (took >= BUDGET_MS) throw new Error(`it took ${took} ms, over the ${BUDGET_MS} ms budget`);
} finally {
  for (const r of replicas) if (r.proc.exitCode === null) r.proc.kill('SIGKILL');
  await server.dispose();
  fs.rmSync(tmp, { recursive: true, force: true });
}

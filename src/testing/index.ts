/**
 * `pgleaderlock/testing`: stand-ins for `LeaderLock` and `PartitionedLeadership` in unit
 * tests, with no database. Type the code under test against `LeaderElection` (or
 * `PartitionedElection`) from `pgleaderlock`, pass it a fake in tests, and drive the fake:
 * `elect()`, `lose()`, `newLeader(id)`; `assign()`, `revoke()`. See docs/testing-your-code.md.
 * @packageDocumentation
 */
export { FAKE_HOST, FakeLeaderLock, type FakeLeaderLockOptions } from './fake-leader-lock.js';
export { FakePartitionedLeadership, type FakePartitionedLeadershipOptions } from './fake-partitioned.js';
export type { FakeOptions } from './options.js';

/**
 * `pgleaderlock/node-cron`: run node-cron v4 tasks only on the leader, each fire at most once
 * across replicas (docs/node-cron.md). node-cron is an optional peer dependency: this module
 * never loads it; you pass the coordinator to the node-cron you import.
 * @packageDocumentation
 */
export {
  type LeaderCoordinator,
  type LeaderCoordinatorOptions,
  leaderCoordinator,
  type Queryable,
} from './coordinator.js';
export { type Fire, fireKey, parseFireKey } from './key.js';

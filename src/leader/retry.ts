/** The retry strategies and the retry cycle live in core (core/retry.ts): partitions use them too. */
export * from '../core/retry.js';

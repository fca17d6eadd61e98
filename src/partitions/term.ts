/** One partition's term on this worker: from its take to its revocation. */
export interface PartitionTerm {
  /** 1, 2, 3, … within this worker, across partitions. */
  readonly id: number;
  /** The partition, from 0. */
  readonly partition: number;
  /** When the term opened. */
  readonly acquiredAt: Date;
  /** Aborts the moment the partition is revoked, lost, or the worker shuts down. */
  readonly signal: AbortSignal;
  /** With fencing: this partition's epoch for this term (strictly greater than any earlier owner's); else null. */
  readonly epoch: bigint | null;
}

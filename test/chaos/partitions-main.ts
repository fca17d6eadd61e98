/**
 * Long chaos run for PartitionedLeadership:
 * npm run chaos:partitions [-- seconds workers partitions [kind,kind,…]].
 * Seeded sequences of faults (default: every kind of PARTITION_FAULTS, partition-chaos.ts;
 * seeds from CHAOS_BASE_SEED, default fixed, or only CHAOS_SEED) until the time is up;
 * prints a markdown table per fault kind and each fault's seed and choices;
 * exits 1 on two runs of one partition at once, a term opened past its lease, a fault after
 * which the workers did not balance again, or a partition without a run at the end.
 */
import { stopServersOnSignals } from '../harness/pg-server.js';
import {
  ALL_PARTITION_FAULTS,
  formatPartitionReport,
  PARTITION_FAULTS,
  type PartitionFault,
  runPartitionChaos,
} from './partition-chaos.js';
import { sequenceSeeds } from './plan.js';

stopServersOnSignals();

const seconds = Number(process.argv[2] ?? 120);
const workers = Number(process.argv[3] ?? 4);
const partitions = Number(process.argv[4] ?? 256);
const kinds = (process.argv[5]?.split(',') ?? PARTITION_FAULTS) as PartitionFault[];
for (const k of kinds) {
  if (!ALL_PARTITION_FAULTS.includes(k))
    throw new Error(`unknown fault ${k}: one of ${ALL_PARTITION_FAULTS.join(', ')}`);
}
const started = Date.now();
const r = await runPartitionChaos({
  workers,
  partitions,
  durationMs: seconds * 1000,
  // enough seeds for any duration: the run stops when the time is up
  seeds: sequenceSeeds(30_000, 100_000),
  kinds,
  log: (l) => process.stderr.write(`${l}\n`),
});
const s = r.settings;
console.log(
  `Partition chaos: ${workers} workers, ${partitions} partitions, ${((Date.now() - started) / 1000).toFixed(0)} s, ${r.faults.length} faults, ${r.runs.length} runs, ${r.workersStarted} worker processes started; healthIntervalMs ${s.healthIntervalMs}, queryTimeoutMs ${s.queryTimeoutMs}, server release bound ${s.serverReleaseMs} ms, work stops ${s.stopMs} ms after its abort, takeover delay ${s.takeoverDelayMs} ms, freezes of ${s.freezeMs} ms\n`,
);
console.log(formatPartitionReport(r));
for (const f of r.faults) console.log(`${f.seed}: ${f.step}: ${f.target}`);
const unsettled = r.faults.filter((f) => f.balancedMs === null);
console.log(
  `\noverlaps: ${r.overlaps.length}; terms opened past their lease: ${r.lateStarts.length}; faults not balanced within 60 s: ${unsettled.length}; at the end: ${r.heldAtEnd} partition locks held, ${r.runningAtEnd} partitions running, ownerless: [${r.ownerlessAtEnd.join(',')}]; errors reported to onError: ${r.errors}`,
);
for (const o of r.overlaps.slice(0, 20)) {
  console.log(
    `  overlap: partition ${o.p}: ${o.b} started at ${o.at.toFixed(1)} while ${o.a} ran, ${o.ms.toFixed(1)} ms (after ${o.fault})`,
  );
}
for (const l of r.lateStarts.slice(0, 20)) {
  console.log(
    `  term opened past its lease: partition ${l.p} in ${l.id} at ${l.start.toFixed(1)}, ${(l.start - l.end).toFixed(0)} ms after its lease ended (after ${r.faultAt(l.start)})`,
  );
}
const bad = r.overlaps.length + r.lateStarts.length + unsettled.length + r.ownerlessAtEnd.length;
process.exitCode = bad ? 1 : 0;

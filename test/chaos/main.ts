/**
 * Long chaos run: npm run chaos [-- seconds candidates wait|poll workStopMs takeoverDelayMs] [churn].
 * `churn`: priority churn (candidates with seeded priorities join, leave, come back with new
 * ones; resign and handover requests, handoverTo; kills and terminates) instead of the
 * basic faults. Seeded sequences (plan.ts) until the time is up: seeds from CHAOS_BASE_SEED
 * (default fixed), or only CHAOS_SEED. Prints a markdown table and each sequence's choice
 * list; exits 1 on an overlap after a fault the run covers.
 */
import { stopServersOnSignals } from '../harness/pg-server.js';
import { CHURN_KINDS, formatReport, runChaos } from './chaos.js';
import { sequenceSeeds } from './plan.js';

stopServersOnSignals();

const churn = process.argv.includes('churn');
const args = process.argv.slice(2).filter((a) => a !== 'churn');
const seconds = Number(args[0] ?? 120);
const candidates = Number(args[1] ?? 5);
const acquireMode = (args[2] ?? 'wait') as 'wait' | 'poll';
const workStopMs = args[3] === undefined ? undefined : Number(args[3]);
const takeoverDelayMs = args[4] === undefined ? undefined : Number(args[4]);
const report = await runChaos({
  candidates,
  acquireMode,
  durationMs: seconds * 1000,
  // enough seeds for any duration: the run stops when the time is up
  seeds: sequenceSeeds(churn ? 20_000 : 10_000, 100_000),
  ...(workStopMs === undefined ? {} : { workStopMs }),
  ...(takeoverDelayMs === undefined ? {} : { takeoverDelayMs }),
  ...(churn ? { faults: [...CHURN_KINDS, 'kill', 'terminate'], priorities: 4 } : {}),
  log: (l) => process.stderr.write(`${l}\n`),
});
console.log(
  `Chaos${churn ? ' (priority churn)' : ''}: ${candidates} candidates, ${acquireMode} mode, ${seconds} s, ${report.sequences.length} sequences (seeds ${report.sequences[0]?.seed}…${report.sequences.at(-1)?.seed}), ${report.faults.length} faults, ${report.intervals.length} leadership intervals, ${report.runs.length} runs, server release bound ${report.serverReleaseMs} ms, work stops ${report.workStopMs} ms after its abort, takeover delay ${report.takeoverDelayMs} ms\n`,
);
console.log(formatReport(report));
console.log(`\nclean exits: ${report.cleanExits}/${report.candidatesAtEnd}`);
if (churn) console.log(`\n${report.trace.join('\n')}`);
console.log(`\n${report.sequences.map((s) => `${s.seed}: ${s.steps.join('; ')}`).join('\n')}`);
const covered = (o: { fault: string }): boolean => report.covered.has(o.fault as never);
const bad = [...report.overlaps, ...report.runOverlaps].filter(covered);
process.exitCode = bad.length ? 1 : 0;

/**
 * Long chaos run: npm run chaos [-- seconds candidates wait|poll workStopMs takeoverDelayMs].
 * Prints a markdown table; exits 1 on an overlap after a fault the run covers.
 */
import { stopServersOnSignals } from '../harness/pg-server.js';
import { formatReport, runChaos } from './chaos.js';

stopServersOnSignals();

const seconds = Number(process.argv[2] ?? 120);
const candidates = Number(process.argv[3] ?? 5);
const acquireMode = (process.argv[4] ?? 'wait') as 'wait' | 'poll';
const workStopMs = process.argv[5] === undefined ? undefined : Number(process.argv[5]);
const takeoverDelayMs = process.argv[6] === undefined ? undefined : Number(process.argv[6]);
const report = await runChaos({
  candidates,
  acquireMode,
  durationMs: seconds * 1000,
  ...(workStopMs === undefined ? {} : { workStopMs }),
  ...(takeoverDelayMs === undefined ? {} : { takeoverDelayMs }),
  log: (l) => process.stderr.write(`${l}\n`),
});
console.log(
  `Chaos: ${candidates} candidates, ${acquireMode} mode, ${seconds} s, ${report.faults.length} faults, ${report.intervals.length} leadership intervals, ${report.runs.length} runs, server release bound ${report.serverReleaseMs} ms, work stops ${report.workStopMs} ms after its abort, takeover delay ${report.takeoverDelayMs} ms\n`,
);
console.log(formatReport(report));
console.log(`\nclean exits: ${report.cleanExits}/${candidates}`);
const covered = (o: { fault: string }): boolean => report.covered.has(o.fault as never);
const bad = [...report.overlaps, ...report.runOverlaps].filter(covered);
process.exitCode = bad.length ? 1 : 0;

/** Long chaos run: npm run chaos [-- seconds candidates]. Prints a markdown table. */
import { stopServersOnSignals } from '../harness/pg-server.js';
import { formatReport, runChaos } from './chaos.js';

stopServersOnSignals();

const seconds = Number(process.argv[2] ?? 120);
const candidates = Number(process.argv[3] ?? 5);
const acquireMode = (process.argv[4] ?? 'wait') as 'wait' | 'poll';
const report = await runChaos({
  candidates,
  acquireMode,
  durationMs: seconds * 1000,
  log: (l) => process.stderr.write(`${l}\n`),
});
console.log(
  `Chaos: ${candidates} candidates, ${seconds} s, ${report.faults.length} faults, ${report.intervals.length} leadership intervals, server release bound ${report.serverReleaseMs} ms\n`,
);
console.log(formatReport(report));
console.log(`\nclean exits: ${report.cleanExits}/${candidates}`);
const bad = report.overlaps.filter((o) => ['kill', 'stepDown', 'blackhole', 'freeze'].includes(o.fault));
process.exitCode = bad.length ? 1 : 0;

#!/usr/bin/env node
// The bounds audit's reading (issue 37 part 2): the figures that test/harness/record-bounds.ts
// recorded (PGLEADERLOCK_RECORD_BOUNDS=<file> on a vitest run), joined with the inventory's
// absolute bounds (scripts/timing-inventory.mjs): per bound, the samples, the worst one (the least
// room between figure and bound), its figure and bound, and whether it is at least 3 × the worst.
//   node scripts/bounds-report.mjs <file.jsonl>... [--all]   (--all: every recorded bound, not only absolute ones)
import { execSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { FACTOR, inventory } from './timing-inventory.mjs';

const args = process.argv.slice(2);
const all = args.includes('--all');
const files = args.filter((a) => !a.startsWith('--'));
const seen = new Map();
// the line numbers are those of the commit recorded: warn when the tests have moved since
const head = execSync('git rev-parse HEAD', { encoding: 'utf8' }).trim();
const stale = new Set();
for (const file of files) {
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const r = JSON.parse(line);
    if (r.rev !== head) stale.add(`${file} (${r.rev ? r.rev.slice(0, 7) : 'no commit recorded'})`);
    const at = `${r.at} ${r.matcher.replace('toBe', '')}`;
    const s = seen.get(at) ?? { samples: [], matcher: r.matcher };
    s.samples.push([r.actual, r.bound]);
    seen.set(at, s);
  }
}
const rows = inventory().filter((r) => all || r.cls === 'absolute');
const fmt = (n) => (Math.abs(n) >= 100 ? n.toFixed(0) : n.toFixed(1));
console.log('| bound | class | marker | samples | worst | bound seen | × | at 3× |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of rows) {
  const at = `${r.file}:${r.line}`;
  // the same line and matcher only (a neighbour's figures would pass for this bound's)
  const s = seen.get(`${at} ${r.bound.split(' ')[0]}`);
  if (!s) continue;
  const upper = s.matcher.startsWith('toBeLess');
  // per sample (a bound may differ between samples: a baseline, a moment): the one with the
  // least room, bound / figure for an upper bound
  const room = ([actual, bound]) => (upper ? bound / Math.max(actual, 1e-9) : actual / Math.max(bound, 1e-9));
  const [worst, bound] = s.samples.reduce((a, b) => (room(b) < room(a) ? b : a));
  const ratio = room([worst, bound]);
  console.log(
    `| ${at} \`${r.bound}\` | ${r.cls} | ${r.marker ?? ''} | ${s.samples.length} | ${fmt(worst)} | ${fmt(bound)} | ${ratio.toFixed(2)} | ${upper ? (ratio >= FACTOR ? 'yes' : 'NO') : ''} |`,
  );
}
if (stale.size > 0)
  console.warn(
    `recorded at another commit than HEAD ${head.slice(0, 7)} (lines may have moved): ${[...stale].join(', ')}`,
  );

#!/usr/bin/env node
// The bounds audit's reading (issue 37 part 2): the figures that test/harness/record-bounds.ts
// recorded (PGLEADERLOCK_RECORD_BOUNDS=<file> on a vitest run), joined with the inventory's
// absolute bounds (scripts/timing-inventory.mjs): per bound, the samples, the worst one (the least
// room between figure and bound), its figure and bound, and whether it is at least 3 × the worst.
//   node scripts/bounds-report.mjs <file.jsonl>... [--all]   (--all: every recorded bound, not only absolute ones)
import { readFileSync } from 'node:fs';
import { FACTOR, inventory } from './timing-inventory.mjs';

const args = process.argv.slice(2);
const all = args.includes('--all');
const files = args.filter((a) => !a.startsWith('--'));
const seen = new Map();
for (const file of files) {
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const r = JSON.parse(line);
    const s = seen.get(r.at) ?? { samples: [], matcher: r.matcher };
    s.samples.push([r.actual, r.bound]);
    seen.set(r.at, s);
  }
}
const rows = inventory().filter((r) => all || r.cls === 'absolute');
const fmt = (n) => (Math.abs(n) >= 100 ? n.toFixed(0) : n.toFixed(1));
console.log('| bound | class | marker | samples | worst | bound seen | × | at 3× |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of rows) {
  const at = `${r.file}:${r.line}`;
  const s = seen.get(at) ?? seen.get(`${r.file}:${r.line + 1}`) ?? seen.get(`${r.file}:${r.line - 1}`);
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

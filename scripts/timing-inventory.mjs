// The wall-clock bounds of the real-time test projects (issue 37, part 2), found by reading the
// test files: every `expect(…).toBeLessThan…/toBeGreaterThan…` whose sides are durations, and
// every `expectNearBaseline(…)` (test/harness/baseline.ts). Prints one row per bound
// (file:line, the bound, its class) and the counts per class.
//
//   node scripts/timing-inventory.mjs            the table and the counts
//   node scripts/timing-inventory.mjs --counts   the counts only
//
// Classes: `baseline` (against a figure measured in the same test: a bare client, a bare timer,
// a connection's cost), `absolute` (an upper bound in fixed milliseconds: docs/testing.md's
// table of absolute bounds must give the worst figure seen, at most a third of the bound),
// `lower` (a floor a rule of the library sets, such as a takeover delay: load only lengthens
// the span, so it cannot fail from load; the simulation's work to make exact), `mixed` (a
// baseline bound capped by a fixed figure: the cap is an absolute bound). The reading is a
// heuristic; NOT_DURATION lists what it takes for a duration but is a count or an order.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const DIRS = ['integration', 'timing', 'cli', 'compat', 'chaos', 'contract'];
const MATCHER = /\.(toBeLessThan|toBeLessThanOrEqual|toBeGreaterThan|toBeGreaterThanOrEqual)\(/g;
// a side that names a duration or a moment
const TIME =
  /([bB]are|baseline|diffs|\bms\b|Ms\b|_MS\b|MS\b|\bms\(|elapsed|took|\btook\b|now\(\)|\blag|late|delay|pause|gap\b|spent|seconds|duration|latency|\bat\b|At\b|\.at\b|since|after|before|fromCall|handover|takeover|failover|excess|\bt\b|\bt0\b|released|next\b|cycles|quiet|wait|left\b|back_|first|unready|margin|budget|terminate|graceful|timeout|TIMEOUT|DELAY|SLICE|QUERY|HEALTH|HOLD|INTERVAL|exitAt|exited|ready|stopped|heard|sum\b|\bp50\b|median|med\(|sorted|samples)/;
// a side with no constant, no number and no baseline: an order of two moments, not a bound
const HAS_FIGURE = /\d|[A-Z][A-Z_]{2,}|baseline|bare|lateness|budget|connectMs|limit|Ms\b|ms\b/;
const BASELINE = /baseline|bare|lateness|connectMs|physical|\bbase\b|\bafter\b.*\bbase|limit\b/i;
// statements the heuristic reads as durations that are counts, sizes or orders (file › text)
const NOT_DURATION = [
  [
    '',
    /\.length\b|\.size\b|errors|attempts|queries|statements|samples\)|entries|options|count|dropped|failures|epoch|overlaps|pids|fires|runs\b|terms\b|indexOf|most\b/,
  ],
  ['otel.test.ts', /handoff\.sum\)\.toBeGreaterThanOrEqual\(0/],
  ['http.test.ts', /lease\)|failover\)\.toBeGreaterThanOrEqual\(0/],
  ['partitions.test.ts', /leaseExpiresAt/],
];

function statementAt(text, at) {
  // the expect( that opens this matcher's statement: the last one before it
  const start = text.lastIndexOf('expect(', at);
  let depth = 0;
  let i = at + text.slice(at).indexOf('(');
  const argStart = i + 1;
  for (; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')' && --depth === 0) break;
  }
  return { subject: text.slice(start, at), bound: text.slice(argStart, i), start };
}

export function inventory(root = 'test') {
  const rows = [];
  for (const dir of DIRS) {
    for (const name of readdirSync(join(root, dir)).filter((n) => n.endsWith('.test.ts'))) {
      const file = join(root, dir, name);
      const text = readFileSync(file, 'utf8');
      const lineOf = (pos) => text.slice(0, pos).split('\n').length;
      for (const m of text.matchAll(/expectNearBaseline\(\s*([^,]*),/g)) {
        rows.push({
          file,
          line: lineOf(m.index),
          cls: 'baseline',
          bound: `expectNearBaseline(${m[1].slice(0, 70)}…)`,
        });
      }
      for (const m of text.matchAll(MATCHER)) {
        const { subject, bound, start } = statementAt(text, m.index);
        const both = `${subject} ${bound}`.replace(/\s+/g, ' ');
        if (!TIME.test(both)) continue;
        if (NOT_DURATION.some(([f, re]) => file.endsWith(f) && re.test(`${both}).${m[1]}(`))) continue;
        if (!HAS_FIGURE.test(bound)) continue; // an order of two moments
        const lower = m[1].startsWith('toBeGreater');
        const context = text.slice(Math.max(0, start - 900), start);
        const named =
          BASELINE.test(bound) ||
          /bare|baseline/i.test(subject) ||
          (/^\s*[a-z]\w*\s*[+*]/.test(bound) && BASELINE.test(context));
        const capped = named && /Math\.min\(/.test(bound);
        const cls = lower ? 'lower' : capped ? 'mixed' : named ? 'baseline' : 'absolute';
        rows.push({
          file,
          line: lineOf(m.index),
          cls,
          bound: `${m[1].replace('toBe', '')} ${bound.replace(/\s+/g, ' ').slice(0, 80)}`,
        });
      }
    }
  }
  return rows;
}

const rows = inventory();
const counts = {};
for (const r of rows) counts[r.cls] = (counts[r.cls] ?? 0) + 1;
if (!process.argv.includes('--counts')) {
  console.log('| file:line | bound | class |\n| --- | --- | --- |');
  for (const r of rows)
    console.log(`| ${r.file}:${r.line} | \`${r.bound.replaceAll('|', '\\|')}\` | ${r.cls} |`);
}
console.log(
  `\n${rows.length} wall-clock bounds: ${Object.entries(counts)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ')}`,
);

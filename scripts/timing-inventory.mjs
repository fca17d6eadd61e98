// The wall-clock bounds of the real-time test projects (issue 37, part 2), found by reading the
// test files: every `expect(…).toBeLessThan…/toBeGreaterThan…` whose sides are durations, and
// every `expectNearBaseline(…)` (test/harness/baseline.ts). Prints one row per bound
// (file:line, the bound, its class) and the counts per class.
//
//   node scripts/timing-inventory.mjs            the table and the counts
//   node scripts/timing-inventory.mjs --counts   the counts only
//   node scripts/timing-inventory.mjs --check    also each absolute bound against docs/testing.md:
//                                                exits 1 if one in an AUDITED file fails the rule
//   --root DIR, --docs FILE                      another tree (test/unit/timing-inventory.test.ts)
//
// An absolute bound is linked to its row in docs/testing.md by a marker comment
// `// bound: <id>` on the assertion's lines or in the comment lines right above it (grep the id
// to find both). The row, in the table "Absolute bounds and the worst figure recorded", gives the
// bound and the worst figure recorded for it; the check fails when the bound is less than 3 ×
// that figure (for a row whose bound says `rule N`, the time a rule of the library gives, a
// fixed wait or the most its rule allows: when the margin over N is less than 3 × the most a
// recorded figure went past N), when the row's bound differs from the code's (where the code's bound evaluates to
// a number from literals and the file's own `const NAME = number`), or when the bound has no
// marker or its marker no row. It is a failing check for the files in AUDITED (a list that
// grows as files are audited) and a report for the rest.
//
// Classes: `baseline` (against a figure measured in the same test: a bare client, a bare timer,
// a connection's cost), `absolute` (an upper bound in fixed milliseconds: docs/testing.md's
// table of absolute bounds must give the worst figure seen, at most a third of the bound),
// `lower` (a floor a rule of the library sets, such as a takeover delay: load only lengthens
// the span, so it cannot fail from load; the simulation's work to make exact), `mixed` (a
// baseline bound capped by a fixed figure: the cap is an absolute bound). The reading is a
// heuristic; NOT_DURATION lists what it takes for a duration but is a count or an order.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// the files whose absolute bounds have been audited (issue 37 part 2): each must be linked to a
// row of docs/testing.md with a bound at least 3 × the worst figure recorded
export const AUDITED = [
  'chaos/partitions.test.ts',
  'cli/cli-claims.test.ts',
  'cli/commands.test.ts',
  'cli/demo-partitions.test.ts',
  'cli/doctor.test.ts',
  'cli/fence.test.ts',
  'cli/http.test.ts',
  'cli/no-cancel.test.ts',
  'cli/requests.test.ts',
  'compat/cli-slow.test.ts',
  'compat/endpoint-retarget.test.ts',
  'compat/failover-claims.test.ts',
  'compat/failover.test.ts',
  'compat/pgbouncer-partitions.test.ts',
  'compat/pgpool.test.ts',
  'contract/contract.test.ts',
  'contract/hosts.test.ts',
  'integration/deploy.test.ts',
  'integration/failover-edges.test.ts',
  'integration/failover.test.ts',
  'integration/faults.test.ts',
  'integration/fence-claims.test.ts',
  'integration/fencing.test.ts',
  'integration/health.test.ts',
  'integration/ids.test.ts',
  'integration/leader-lock.test.ts',
  'integration/leader-watch.test.ts',
  'integration/no-cancel.test.ts',
  'integration/node-cron.test.ts',
  'integration/observability-claims.test.ts',
  'integration/otel.test.ts',
  'integration/partitions-failover.test.ts',
  'integration/partitions-safety.test.ts',
  'integration/partitions-unheard.test.ts',
  'integration/partitions.test.ts',
  'integration/readiness-blackhole.test.ts',
  'integration/safety-claims.test.ts',
  'integration/succession.test.ts',
  'integration/takeover-delay.test.ts',
  'integration/terms.test.ts',
  'integration/wait-mode.test.ts',
  'timing/demo-failover.test.ts',
  'timing/frozen-default.test.ts',
  'timing/leader-watch.test.ts',
  'timing/node-cron-handover.test.ts',
  'timing/observability-claims.test.ts',
  'timing/partitions-drain.test.ts',
  'timing/proof-of-drain.test.ts',
  'timing/succession.test.ts',
];
/** The factor between an absolute bound and the worst figure recorded for it. */
export const FACTOR = 3;

const DIRS = ['integration', 'timing', 'cli', 'compat', 'chaos', 'contract'];
const MATCHER = /\.(toBeLessThan|toBeLessThanOrEqual|toBeGreaterThan|toBeGreaterThanOrEqual)\(/g;
// a side that names a duration or a moment
const TIME =
  /([bB]are|baseline|diffs|\bms\b|Ms\b|_MS\b|MS\b|\bms\(|elapsed|took|\btook\b|now\(\)|\blag|late|delay|pause|gap\b|spent|seconds|duration|latency|\bat\b|At\b|\.at\b|since|after|before|fromCall|handover|takeover|failover|excess|\bt\b|\bt0\b|released|next\b|cycles|quiet|wait|left\b|back_|first|unready|margin|budget|terminate|graceful|timeout|TIMEOUT|DELAY|SLICE|QUERY|HEALTH|HOLD|INTERVAL|exitAt|exited|ready|stopped|heard|[cC]losed\b|[a-z]After\b|sum\b|\bp50\b|median|med\(|sorted|samples)/;
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
  // invariants, which load cannot break: the lease left is at most the lease (it was set at a
  // check in the past), a reported span at most the span the test saw around it
  ['partitions.test.ts', /expect\(lease - performance\.now\(\)\)/],
  ['observability-claims.test.ts', /expect\(lease\) leaseMs\)|opened\[n - 1\] as number\) - fence\.since/],
  // a count of the peer watch's statements in a window (at most one per 100 ms interval: load
  // only makes fewer), not a span
  ['failover-claims.test.ts', /expect\(probes\b/],
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

/** The `// bound: <id>` on the statement's lines, or in the comment lines right above it. */
function markerAt(text, start, at) {
  const lines = text.split('\n');
  const first = text.slice(0, start).split('\n').length - 1;
  const last = text.slice(0, at).split('\n').length - 1;
  const found = (line) => /\/\/.*\bbound: ([\w./-]+)/.exec(line)?.[1] ?? null;
  for (let i = last; i >= first; i--) {
    const id = found(lines[i]);
    if (id) return id;
  }
  for (let i = first - 1; i >= 0 && /^\s*\/\//.test(lines[i]); i--) {
    const id = found(lines[i]);
    if (id) return id;
  }
  return null;
}

/** The bound in ms where it is literals and the file's own `const NAME = …` of literals, else null. */
function evaluate(bound, text) {
  let expr = bound.trim().replace(/,$/, '');
  for (let pass = 0; pass < 4 && /[A-Za-z_]/.test(expr); pass++) {
    expr = expr.replace(/\b[A-Za-z_]\w*\b/g, (name) => {
      const d = new RegExp(`\\bconst ${name}\\s*=\\s*([\\d_ +*/().]+|[A-Z_ +*/()\\d.]+);`).exec(text);
      return d ? `(${d[1]})` : name;
    });
  }
  expr = expr.replaceAll('_', '');
  if (!/^[\d\s+*/().-]+$/.test(expr)) return null;
  const v = Function(`"use strict"; return (${expr});`)();
  return Number.isFinite(v) ? v : null;
}

/** The rows of docs/testing.md's table of absolute bounds: id → { bound, worst }. */
export function boundRows(docs) {
  const rows = new Map();
  for (const line of docs.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const id = /^`([\w./-]+)`$/.exec(cells[1] ?? '')?.[1];
    if (!id || cells.length < 6) continue;
    const num = (c) => {
      const m = /[\d,]+(\.\d+)?/.exec(c ?? '');
      return m ? Number(m[0].replaceAll(',', '')) : Number.NaN;
    };
    // the time a rule gives plus a margin: `4,000 (rule 3,000 + 1,000)`; the margin is what load may use
    const rule = /\brule ([\d,]+(\.\d+)?)/.exec(cells[3] ?? '');
    rows.set(id, {
      bound: num(cells[3]),
      worst: num(cells[4]),
      rule: rule ? Number(rule[1].replaceAll(',', '')) : null,
    });
  }
  return rows;
}

/** Each absolute bound against its row: [{ row, audited, problem | null }]. */
export function checkAbsolute(rows, docs, audited = AUDITED) {
  const table = boundRows(docs);
  return rows
    .filter((r) => r.cls === 'absolute' || r.cls === 'mixed')
    .map((r) => {
      const isAudited = audited.some((f) => r.file.replaceAll('\\', '/').endsWith(`test/${f}`));
      const row = r.marker ? table.get(r.marker) : undefined;
      let problem = null;
      if (!r.marker) problem = 'no `// bound: <id>` marker';
      else if (!row) problem = `no row \`${r.marker}\` in docs/testing.md`;
      else if (!(row.worst >= 0) || !(row.bound > 0))
        problem = `row \`${r.marker}\` gives no bound or figure`;
      else if (r.value !== null && r.value !== row.bound)
        problem = `the code's bound is ${r.value} ms, the row \`${r.marker}\` says ${row.bound}`;
      else if (row.rule !== null) {
        // the rule's time + a margin: the margin at least 3 × the most a figure went past it
        const margin = row.bound - row.rule;
        const excess = Math.max(0, row.worst - row.rule);
        if (!(row.rule > 0) || margin < FACTOR * excess)
          problem = `a margin of ${margin} ms over the rule's ${row.rule} ms is ${(margin / excess).toFixed(2)} × the worst excess ${excess.toFixed(1)} ms (< ${FACTOR} ×)`;
      } else if (row.bound < FACTOR * row.worst)
        problem = `${row.bound} ms is ${(row.bound / row.worst).toFixed(2)} × the worst figure ${row.worst} ms (< ${FACTOR} ×)`;
      return { ...r, audited: isAudited, row: row ?? null, problem };
    });
}

export function inventory(root = 'test') {
  const rows = [];
  for (const dir of DIRS) {
    if (!existsSync(join(root, dir))) continue;
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
          marker: cls === 'absolute' || cls === 'mixed' ? markerAt(text, start, m.index) : null,
          value: cls === 'absolute' ? evaluate(bound, text) : null,
        });
      }
    }
  }
  return rows;
}

const isMain = process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href;
if (isMain) main();

function main() {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : fallback;
  };
  const rows = inventory(arg('--root', 'test'));
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
  if (process.argv.includes('--check')) {
    const docsFile = arg('--docs', 'docs/testing.md');
    const checked = checkAbsolute(rows, existsSync(docsFile) ? readFileSync(docsFile, 'utf8') : '');
    const failing = checked.filter((c) => c.audited && c.problem);
    const linked = checked.filter((c) => !c.problem);
    const ruled = linked.filter((c) => c.row?.rule != null).length;
    console.log(
      `absolute bounds: ${linked.length} linked to a row at >= ${FACTOR} × the worst figure (${ruled} of them a rule's time plus a margin >= ${FACTOR} × the worst excess over it), ${failing.length} failing in audited files, ${checked.filter((c) => !c.audited && c.problem).length} unaudited (${AUDITED.length} files audited)`,
    );
    for (const c of checked.filter((x) => x.problem))
      console.log(`${c.audited ? 'FAIL' : 'unaudited'} ${c.file}:${c.line} \`${c.bound}\`: ${c.problem}`);
    if (failing.length > 0) process.exitCode = 1;
  }
}

/**
 * The bench's failover rows as a component of the suite (`npm run bench -- --trials 1 --only
 * latency --check`): a row that no longer runs throws and fails it (the SIGKILL row once
 * broke for a day unseen), and `--check` holds the headline figures as ratios against the
 * limit measured in the same run (bench/checks.ts). One trial a row: every trial but the
 * restart rows' starts from new locks and children, so a second shows nothing the first does
 * not (the in-process rows run 20 for the checks). It mostly waits (about 20 % of the 2 cores
 * alone: takeover delays, restarts), hence the light lane; its checks are ratios against
 * references measured interleaved, so the lane beside moves both sides.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Component } from './component.js';
import { run } from './vitest.js';

/** A row of the checks table (bench/checks.ts): `| claim | measured | yes |` or `… | **no** |`. */
const CHECK_ROW = /^\|.*\|\s*(yes|\*\*no\*\*)\s*\|$/;

export function benchComponent(): Component {
  const label = "the bench's failover rows (1 trial each) and its headline checks (bench/checks.ts)";
  return {
    id: 'bench',
    seconds: 80,
    light: true,
    usesBuild: false, // from the sources, under tsx
    compatProject: false,
    async run(ctx) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-compat-bench-'));
      const file = path.join(dir, 'bench.md');
      try {
        const code = await run(
          process.execPath,
          [
            '--expose-gc',
            '--import',
            'tsx',
            'bench/failover.ts',
            '--trials',
            '1',
            '--only',
            'latency',
            '--check',
          ],
          { cwd: ctx.root, env: { ...ctx.env, BENCH_OUT: file }, out: ctx.out },
        );
        const rows = fs.existsSync(file)
          ? fs
              .readFileSync(file, 'utf8')
              .split('\n')
              .flatMap((l) => CHECK_ROW.exec(l.trim())?.slice(1, 2) ?? [])
          : [];
        const passed = rows.filter((r) => r === 'yes').length;
        return {
          component: label,
          ok: code === 0 && rows.length > 0 && passed === rows.length,
          passed,
          total: rows.length,
          ...(code !== 0 ? { note: `bench/failover.ts exited ${code}` } : {}),
          ...(code === 0 && rows.length === 0 ? { note: 'no checks table in its output' } : {}),
        };
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

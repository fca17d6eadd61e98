/**
 * docs/deploy.md: every code block is a file of examples/deploy/, quoted verbatim, and each
 * file is run or checked here. The worker runs against PostgreSQL under SIGTERM and SIGINT;
 * the Deployment is validated against the Kubernetes schema (kubernetes-models: its
 * validator, and its types for unknown fields); the systemd unit by `systemd-analyze
 * verify`; the PM2 file is loaded and its fields checked (PM2 itself is not run here).
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import ts from 'typescript';
import { afterEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { SHUTDOWN_TIMEOUT_MS } from '../../examples/deploy/worker.js';
import { LeaderLock } from '../../src/index.js';
import { cleanEnv, type Running, watch } from '../harness/cli.js';
import { databaseUrl, eventually, lockHolders } from '../harness/db.js';

const root = path.resolve(import.meta.dirname, '../..');
const dir = path.join(root, 'examples/deploy');
const doc = fs.readFileSync(path.join(root, 'docs/deploy.md'), 'utf8');
const read = (file: string): string => fs.readFileSync(path.join(dir, file), 'utf8');
const FILES = ['worker.ts', 'deployment.yaml', 'nightly-billing.service', 'ecosystem.config.cjs'];
const [key1, key2] = LeaderLock.keysFromName('nightly-billing');
/** The stubborn worker's shutdown timeout in the test of the cut (the fixture's STUBBORN_SHUTDOWN_MS). */
const CUT_MS = 1500;

/** The fenced code blocks of a markdown text. */
function codeBlocks(markdown: string): { lang: string; body: string }[] {
  return [...markdown.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({
    lang: m[1] ?? '',
    body: m[2] ?? '',
  }));
}

// ── the worker, as a process ──────────────────────────────────────────────────

interface Worker extends Running {
  port: number;
  /** performance.now() when the process exited. */
  exitedAt: Promise<number>;
  /** performance.now() when each line was printed. */
  at(re: RegExp): number | undefined;
}

const started: ChildProcess[] = [];
afterEach(async () => {
  for (const proc of started.splice(0)) {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await new Promise((resolve) => proc.once('exit', resolve));
    }
  }
  await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 0, {
    what: 'the workers’ sessions to end',
  });
});

async function startWorker(file = path.join(dir, 'worker.ts'), env: NodeJS.ProcessEnv = {}): Promise<Worker> {
  const proc = spawn(process.execPath, ['--import', 'tsx', file], {
    cwd: root,
    env: cleanEnv({ DATABASE_URL: databaseUrl(), PROBES_PORT: '0', ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(proc);
  const times: { line: string; t: number }[] = [];
  const running = watch(proc);
  createInterface({ input: proc.stdout as NodeJS.ReadableStream }).on('line', (line) => {
    times.push({ line, t: performance.now() });
  });
  const exitedAt = new Promise<number>((resolve) => proc.once('exit', () => resolve(performance.now())));
  const port = Number(/probes on port (\d+)/.exec(await running.line(/probes on port \d+/))?.[1]);
  return { ...running, port, exitedAt, at: (re) => times.find((x) => re.test(x.line))?.t };
}

function get(port: number, urlPath: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: urlPath }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      })
      .once('error', reject);
  });
}

/** Both /healthz and /readyz answer 200. */
async function liveAndReady(port: number): Promise<boolean> {
  return (await get(port, '/healthz')) === 200 && (await get(port, '/readyz')) === 200;
}

describe('docs/deploy.md', () => {
  it('quotes each file of examples/deploy verbatim, and has no other code block', () => {
    const blocks = codeBlocks(doc);
    const bodies = FILES.map((f) => read(f));
    for (const body of bodies) expect(blocks.map((b) => b.body)).toContain(body);
    expect(blocks).toHaveLength(FILES.length);
  });

  it('worker: a follower is live and ready; SIGTERM to the leader hands over without a takeover delay; SIGINT (PM2) stops the other', {
    tags: ['node-line'],
  }, async () => {
    // the fixed name: wait until no other test of this run holds its keys
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 0);
    const a = await startWorker();
    await a.line(/^leading \(term 1\)$/);
    const b = await startWorker();
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 2, {
      what: 'the second worker to wait for the lock',
    });
    await eventually(() => liveAndReady(b.port), { what: 'the follower to be live and ready' });
    expect(await liveAndReady(a.port)).toBe(true);

    const t0 = performance.now();
    a.proc.kill('SIGTERM');
    const [{ code }, exitAt] = await Promise.all([a.exited, a.exitedAt]);
    expect(code).toBe(0);
    await b.line(/^leading \(term 1\)$/, 5_000);
    // a clean release: the next leader skips the takeover delay
    expect(b.lines.filter((l) => l.startsWith('holding the lock'))).toEqual([]);
    console.log(`[deploy] SIGTERM → exit ${(exitAt - t0).toFixed(0)} ms`);
    // bound: integration/deploy-shutdown-timeout
    expect(exitAt - t0).toBeLessThan(SHUTDOWN_TIMEOUT_MS);

    b.proc.kill('SIGINT');
    expect((await b.exited).code).toBe(0);
    expect(b.lines).toContain('SIGINT: shutting down');
    expect(await lockHolders(databaseUrl(), key1, key2)).toEqual([]);
  });

  // The worker asks its shutdown for SHUTDOWN_TIMEOUT_MS (10 s, checked below); the fixture
  // runs it with CUT_MS instead, so that the test sees the cut without waiting out 10 s: that
  // the lock cuts a shutdown at its timeoutMs is the library's rule (contract.test.ts › the
  // close timeout; fence-claims › shutdown past its deadline), the same for any length
  it(`worker: leader work that ignores its signal is cut at the shutdown's timeoutMs (the worker asks for SHUTDOWN_TIMEOUT_MS, ${SHUTDOWN_TIMEOUT_MS} ms; ${CUT_MS} ms here) after SIGTERM; the next leader waits the takeover delay and starts after the old process’s last line, at its exit`, {
    tags: ['node-line'],
    timeout: 30_000,
  }, async () => {
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 0);
    const a = await startWorker(path.join(root, 'test/fixtures/deploy-worker-stubborn.fixture.ts'), {
      STUBBORN_SHUTDOWN_MS: String(CUT_MS),
    });
    await a.line(/stubborn work/);
    const b = await startWorker();
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 2, {
      what: 'the second worker to wait for the lock',
    });
    const t0 = performance.now();
    a.proc.kill('SIGTERM');
    await a.line(/^SIGTERM: shutting down$/);
    expect(await get(a.port, '/readyz')).toBe(503); // shutting down: not ready
    const [{ code }, exitAt] = await Promise.all([a.exited, a.exitedAt]);
    const ms = exitAt - t0;
    console.log(`[deploy] stubborn work: SIGTERM → exit ${ms.toFixed(0)} ms`);
    expect(code).toBe(0);
    expect(a.lines.some((l) => l.includes('runWhileLeader'))).toBe(true); // the ShutdownError, logged
    expect(a.lines).toContain(`shutdown asked with timeoutMs ${SHUTDOWN_TIMEOUT_MS}`); // the worker's own
    expect(ms).toBeGreaterThanOrEqual(CUT_MS - 50);
    // bound: integration/deploy-stubborn-exit
    expect(ms).toBeLessThan(CUT_MS + 1_000);
    await b.line(/^leading \(term 1\)$/, 5_000);
    expect(b.lines).toContain('holding the lock, leading in 250 ms');
    // after the old process's last line, written as it calls process.exit: its 'exit' event
    // here comes only once the kernel has torn it down (in a loaded compat run, 49 ms after
    // the new leader's line, which came 250 ms after the old session closed)
    expect(a.lines).toContain('exiting');
    expect(b.at(/^leading \(term 1\)$/)).toBeGreaterThan(a.at(/^exiting$/) as number);
  });

  it('worker: a second signal during the shutdown ends the process at once: killed by the signal (Node’s default action), not after the shutdown', {
    tags: ['node-line'],
  }, async () => {
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 0);
    const a = await startWorker(path.join(root, 'test/fixtures/deploy-worker-stubborn.fixture.ts'));
    await a.line(/stubborn work/);
    const b = await startWorker(); // for the baseline: how soon this test sees a SIGKILLed worker exit
    a.proc.kill('SIGTERM');
    await a.line(/^SIGTERM: shutting down$/);
    // the second SIGTERM and, at the same instant, a SIGKILL to the other: this test's view of
    // both exits is delayed alike by its own load
    const t0 = performance.now();
    a.proc.kill('SIGTERM');
    b.proc.kill('SIGKILL');
    const [{ signal }, exitAt, killedAt] = await Promise.all([a.exited, a.exitedAt, b.exitedAt]);
    console.log(
      `[deploy] second SIGTERM → exit ${(exitAt - t0).toFixed(1)} ms; SIGKILL at once → exit ${(killedAt - t0).toFixed(1)} ms`,
    );
    // ended by the signal itself (the kernel ends the process on delivery), not by the worker's
    // stop, which would exit 0 after the 10 s timeout; how soon this test sees an exit depends
    // on the machine's load (a SIGKILL sent at the same instant: 85-125 ms, the SIGTERM 86-286)
    expect(signal).toBe('SIGTERM');
    // bound: integration/deploy-under-1s
    expect(exitAt - t0).toBeLessThan(1_000);
  });
});

// ── the platform files ────────────────────────────────────────────────────────

/** TypeScript diagnostics of `source` (a module in the project root, so packages resolve). */
function typeErrors(source: string): string[] {
  const tmp = path.join(root, '.tmp');
  fs.mkdirSync(tmp, { recursive: true });
  const file = path.join(tmp, `deploy-check-${process.pid}.ts`);
  fs.writeFileSync(file, source);
  try {
    const program = ts.createProgram([file], {
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      types: [],
    });
    return ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  } finally {
    fs.rmSync(file, { force: true });
  }
}

describe('examples/deploy: the platform files', () => {
  const manifest = parseYaml(read('deployment.yaml')) as ConstructorParameters<typeof Deployment>[0] & {};
  const pod = manifest.spec?.template.spec;
  const container = pod?.containers[0];

  it('deployment.yaml: valid against the Kubernetes schema, no unknown field', () => {
    expect(() => new Deployment(manifest).validate()).not.toThrow();
    // the schema allows unknown fields; the types do not (excess property checks)
    const check = (json: unknown): string[] =>
      typeErrors(
        `import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';\nexport const d: IDeployment = ${JSON.stringify(json)};\n`,
      );
    expect(check(manifest)).toEqual([]);
    // both checks fail on a broken manifest
    const broken = structuredClone(manifest);
    if (broken.spec?.template.spec?.containers[0]?.livenessProbe?.httpGet) {
      Object.assign(broken.spec.template.spec.containers[0].livenessProbe.httpGet, { pat: '/healthz' });
    }
    expect(check(broken).join('\n')).toMatch(/pat.*does not exist in type 'IHTTPGetAction'/);
    const wrongType = structuredClone(manifest);
    if (wrongType.spec?.template.spec)
      Object.assign(wrongType.spec.template.spec, { terminationGracePeriodSeconds: '30' });
    expect(() => new Deployment(wrongType).validate()).toThrow(
      /terminationGracePeriodSeconds must be integer/,
    );
  }, 30_000);

  it(`deployment.yaml: probes on the worker's port and paths; 30 s grace ≥ 5 s preStop + the ${SHUTDOWN_TIMEOUT_MS / 1000} s shutdown + 5 s`, () => {
    const port = container?.ports?.find((p) => p.name === 'probes')?.containerPort;
    expect(port).toBe(9464); // the worker's default PROBES_PORT
    expect(read('worker.ts')).toContain('Number(process.env.PROBES_PORT ?? 9464)');
    expect(container?.livenessProbe?.httpGet).toEqual({ path: '/healthz', port: 'probes' });
    expect(container?.readinessProbe?.httpGet).toEqual({ path: '/readyz', port: 'probes' });
    expect(container?.command).toEqual(['node', 'dist/worker.js']);
    const preStop = container?.lifecycle?.preStop?.sleep?.seconds;
    const grace = pod?.terminationGracePeriodSeconds;
    expect([preStop, grace]).toEqual([5, 30]);
    expect((grace ?? 0) - (preStop ?? 0) - SHUTDOWN_TIMEOUT_MS / 1000).toBeGreaterThanOrEqual(5);
  });

  it(`nightly-billing.service: systemd-analyze verify finds nothing; Restart=on-failure; TimeoutStopSec ≥ the ${SHUTDOWN_TIMEOUT_MS / 1000} s shutdown + 5 s`, () => {
    const unit = path.join(dir, 'nightly-billing.service');
    const found = spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' });
    if (found.error) throw new Error('systemd-analyze not found: apt-get install systemd');
    const verify = (file: string): string[] => {
      const r = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8' });
      // it exits 0 on settings it ignores, and also reports the machine's own units: keep ours
      return `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => l.includes(path.basename(file)));
    };
    expect(verify(unit)).toEqual([]);
    // and it does report a broken copy
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-unit-'));
    try {
      const bad = path.join(tmp, 'nightly-billing.service');
      fs.writeFileSync(
        bad,
        read('nightly-billing.service').replace('Restart=on-failure', 'Restart=sometimes'),
      );
      expect(verify(bad).join('\n')).toMatch(/restart specifier/);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
    const settings = Object.fromEntries(
      read('nightly-billing.service')
        .split('\n')
        .filter((l) => /^\w+=/.test(l))
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    expect(settings).toMatchObject({
      Restart: 'on-failure',
      RestartSec: '5s',
      TimeoutStopSec: '20s',
      ExecStart: '/usr/bin/env node dist/worker.js',
    });
    expect(20 - SHUTDOWN_TIMEOUT_MS / 1000).toBeGreaterThanOrEqual(5);
    execFileSync('systemd-analyze', ['timespan', settings.TimeoutStopSec ?? '']); // a valid time span
  });

  it(`ecosystem.config.cjs: cluster mode, a probes port per instance, kill_timeout ≥ the ${SHUTDOWN_TIMEOUT_MS / 1000} s shutdown + 5 s`, () => {
    const { apps } = createRequire(import.meta.url)(path.join(dir, 'ecosystem.config.cjs')) as {
      apps: Record<string, unknown>[];
    };
    expect(apps).toHaveLength(1);
    const app = apps[0] ?? {};
    expect(app).toMatchObject({
      script: 'dist/worker.js',
      exec_mode: 'cluster',
      instances: 2,
      env: { PROBES_PORT: 9464 },
      increment_var: 'PROBES_PORT',
      kill_timeout: 15_000,
    });
    expect(Number(app.kill_timeout) - SHUTDOWN_TIMEOUT_MS).toBeGreaterThanOrEqual(5_000);
    // the worker stops on SIGINT, the signal PM2 sends
    expect(read('worker.ts')).toContain("process.once('SIGINT'");
  });
});

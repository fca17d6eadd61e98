/**
 * Run vitest in a child process (under a given Node binary), its output passed through,
 * and read the counts from its JSON report.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface RunResult {
  ok: boolean;
  passed: number;
  total: number;
  /** Why it failed when the counts do not say (a crash, no report). */
  note?: string;
  /** Full names of the failed tests. */
  failed?: string[];
}

/** The commands running now (one per component running), so that an interrupted driver can pass the signal on. */
const running = new Set<ChildProcess>();
let interrupted = false;

/** No suite takes this long (about a minute is usual): a hung one is stopped and fails. */
const RUN_TIMEOUT_MS = 20 * 60_000;

/** Signal a command's whole process group (it was started detached: vitest's workers too). */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid) process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/**
 * Pass `signal` to the running commands, if any, and start no other (later `run()` calls
 * resolve with 130 at once). Only each command itself gets it, so that vitest can stop its
 * workers and run its global teardown (which stops the servers); whatever is left of its
 * process group 20 s later is killed.
 */
export function interruptRunning(signal: NodeJS.Signals): void {
  interrupted = true;
  for (const child of running) {
    child.kill(signal);
    setTimeout(() => signalGroup(child, 'SIGKILL'), 20_000).unref();
  }
}

/**
 * A command started elsewhere (the fresh install's `npm ci`), stopped with the others when the
 * driver is interrupted: the same signal, then SIGKILL 20 s later. Returns whether the driver
 * was interrupted already (the caller then stops it itself).
 */
export function stopWhenInterrupted(child: ChildProcess): boolean {
  if (interrupted) return true;
  running.add(child);
  child.once('exit', () => running.delete(child));
  child.once('error', () => running.delete(child));
  return false;
}

/**
 * Run a command with its output passed through (or written to the file descriptor `out`);
 * resolves with its exit code (-1 if it could not start, 124 if it ran longer than 20
 * minutes and was stopped).
 */
export function run(
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; out?: number | undefined },
): Promise<number> {
  if (interrupted) return Promise.resolve(130);
  const { out, ...spawnOptions } = options;
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      ...spawnOptions,
      detached: true,
      stdio: ['ignore', out ?? 'inherit', out ?? 'inherit'],
    });
    running.add(child);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      console.error(
        `[compat] ${path.basename(command)} ran longer than ${RUN_TIMEOUT_MS / 60_000} min: stopping it`,
      );
      signalGroup(child, 'SIGTERM');
      setTimeout(() => signalGroup(child, 'SIGKILL'), 15_000).unref();
    }, RUN_TIMEOUT_MS);
    child.once('error', (err) => {
      clearTimeout(timer);
      running.delete(child);
      console.error(`[compat] cannot run ${command}: ${err.message}`);
      resolve(-1);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      running.delete(child);
      resolve(timedOut ? 124 : (code ?? (signal ? 128 : -1)));
    });
  });
}

interface JsonReport {
  success?: boolean;
  numTotalTests?: number;
  numPassedTests?: number;
  numPendingTests?: number;
  testResults?: {
    name?: string;
    assertionResults?: {
      ancestorTitles?: string[];
      title?: string;
      status?: string;
      failureMessages?: string[];
    }[];
  }[];
}

/** The failed tests, each with the first lines of its failure (the assertion and where it failed). */
function failedTests(json: JsonReport): string[] {
  return (json.testResults ?? []).flatMap((file) =>
    (file.assertionResults ?? [])
      .filter((t) => t.status === 'failed')
      .map((t) => {
        const name = [path.basename(file.name ?? '?'), ...(t.ancestorTitles ?? []), t.title ?? '?'].join(
          ' > ',
        );
        const why = failureExcerpt(t.failureMessages ?? [], path.basename(file.name ?? ''));
        return why ? `${name}\n${why}` : name;
      }),
  );
}

/** The message's first two lines and the first stack line in the test file, each indented. */
function failureExcerpt(messages: string[], file: string): string {
  const lines = (messages[0] ?? '').split('\n').map((l) => l.trim());
  const head = lines.filter((l) => l && !l.startsWith('at ')).slice(0, 2);
  const where = file ? lines.find((l) => l.startsWith('at ') && l.includes(file)) : undefined;
  return [...head, ...(where ? [where] : [])].map((l) => `    ${l.slice(0, 300)}`).join('\n');
}

/** `node node_modules/vitest/vitest.mjs run ARGS` in `root`, with a JSON report next to the default one. */
export async function runVitest(options: {
  root: string;
  node: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  /** Where its output goes (a file descriptor), else passed through. */
  out?: number | undefined;
  /** `--maxWorkers`, else the config's. */
  maxWorkers?: number | undefined;
  /**
   * `--tags-filter`: only the tests with these tags run; the others are reported skipped and
   * left out of the counts (without a filter a skipped test fails the run).
   */
  tagsFilter?: string | undefined;
}): Promise<RunResult> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-compat-report-'));
  const report = path.join(dir, 'report.json');
  try {
    const code = await run(
      options.node,
      [
        path.join(options.root, 'node_modules', 'vitest', 'vitest.mjs'),
        'run',
        ...options.args,
        ...(options.maxWorkers ? [`--maxWorkers=${options.maxWorkers}`] : []),
        ...(options.tagsFilter ? [`--tags-filter=${options.tagsFilter}`] : []),
        '--reporter=default',
        '--reporter=json',
        `--outputFile.json=${report}`,
      ],
      { cwd: options.root, env: options.env, out: options.out },
    );
    let json: JsonReport | null = null;
    try {
      json = JSON.parse(fs.readFileSync(report, 'utf8')) as JsonReport;
    } catch {
      // no report: the run crashed before writing it
    }
    const passed = json?.numPassedTests ?? 0;
    const filtered = options.tagsFilter ? (json?.numPendingTests ?? 0) : 0;
    const total = (json?.numTotalTests ?? 0) - filtered;
    const ok = code === 0 && json?.success === true && total > 0 && passed === total;
    if (ok) return { ok, passed, total };
    const exit = code === 124 ? 'vitest ran longer than 20 min and was stopped' : `vitest exited ${code}`;
    const note = json ? exit : `${exit} without a report`;
    return { ok, passed, total, note, failed: json ? failedTests(json) : [] };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

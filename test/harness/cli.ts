/** Spawn the built CLI (dist/cli.js) as a user would, and watch its output. */
import { type ChildProcess, spawn } from 'node:child_process';
import { connect } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach } from 'vitest';

export const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../dist/cli.js');

export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface Running {
  proc: ChildProcess;
  /** Resolves with the first stdout/stderr line matching `re` (rejects after timeoutMs). */
  line(re: RegExp, timeoutMs?: number): Promise<string>;
  /**
   * The first line matching `re` and when this process read it, on its monotonic clock
   * (`performance.now()`): to time another process's step without its wall clock, which
   * steps on the test machine (docs/testing.md, "The machine's clock").
   */
  lineAt(re: RegExp, timeoutMs?: number): Promise<{ line: string; at: number }>;
  /** Every line so far, from both streams. */
  readonly lines: string[];
  readonly exited: Promise<Finished>;
}

/** An environment without the variables the CLI reads for its database. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of ['PG_DSN', 'DATABASE_URL', 'PGHOST', 'NODE_DEBUG']) delete env[k];
  return { ...env, ...extra };
}

export function startCli(args: string[], env: NodeJS.ProcessEnv = cleanEnv()): Running {
  return watch(spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] }));
}

/** Watch a process spawned with stdout and stderr piped (e.g. the CLI run through a wrapper). */
export function watch(proc: ChildProcess): Running {
  const lines: string[] = [];
  /** Each line and when it was read (performance.now()), kept apart from `lines`, which callers may change. */
  const read: { line: string; at: number }[] = [];
  const waiters: { re: RegExp; resolve: (l: string) => void }[] = [];
  let stdout = '';
  let stderr = '';
  const onLine = (l: string): void => {
    read.push({ line: l, at: performance.now() });
    lines.push(l);
    for (const w of [...waiters]) {
      if (w.re.test(l)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(l);
      }
    }
  };
  proc.stdout?.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  proc.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  createInterface({ input: proc.stdout as NodeJS.ReadableStream }).on('line', onLine);
  createInterface({ input: proc.stderr as NodeJS.ReadableStream }).on('line', onLine);
  const exited = new Promise<Finished>((resolve) => {
    proc.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  const running: Running = {
    proc,
    lines,
    exited,
    async lineAt(re, timeoutMs) {
      const line = await running.line(re, timeoutMs);
      // `line` resolves with the first line that matches: the first entry of that text
      return read.find((r) => r.line === line) as { line: string; at: number };
    },
    line(re, timeoutMs = 15_000) {
      const seen = lines.find((l) => re.test(l));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => {
          reject(new Error(`no line matching ${re} within ${timeoutMs} ms; output:\n${lines.join('\n')}`));
        }, timeoutMs);
        const w = {
          re,
          resolve: (l: string) => {
            clearTimeout(timer);
            resolve(l);
          },
        };
        waiters.push(w);
        void exited.then(() => {
          if (waiters.includes(w)) {
            clearTimeout(timer);
            reject(new Error(`exited without a line matching ${re}; output:\n${lines.join('\n')}`));
          }
        });
      });
    },
  };
  return running;
}

/** Run the CLI to completion; SIGKILL it after `timeoutMs` so a hung run never outlives its test. */
export async function cli(args: string[], env?: NodeJS.ProcessEnv, timeoutMs = 20_000): Promise<Finished> {
  const r = startCli(args, env);
  const timer = setTimeout(() => r.proc.kill('SIGKILL'), timeoutMs);
  try {
    return await r.exited;
  } finally {
    clearTimeout(timer);
  }
}

/** Nothing listens on the port any more (an embedded server the CLI started is gone). */
export function portClosed(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', () => resolve(true));
  });
}

/**
 * `startCli` for a test file: every CLI it starts is killed (if still running) and awaited
 * after each test, so that none outlives its test.
 */
export function useCli(): (args: string[], env?: NodeJS.ProcessEnv) => Running {
  const running: Running[] = [];
  afterEach(async () => {
    for (const r of running.splice(0)) {
      if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGKILL');
      await r.exited;
    }
  });
  return (args, env) => {
    const r = startCli(args, env);
    running.push(r);
    return r;
  };
}

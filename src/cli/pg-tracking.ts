/**
 * The PostgreSQL servers this process started (embedded-pg.ts) and their data folders, so that
 * none outlives it: on exit, and at once on request ({@link stopAllNow}: a test runner's signal
 * handler, where nothing asynchronous would get to run), every server still running is killed
 * with its backends and every data folder not disposed of is deleted.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';

const live = new Set<ChildProcess>();
const folders = new Set<string>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', stopAllNow);
}

/** A server's postmaster, until it exits. */
export function trackServer(child: ChildProcess): void {
  installExitHook();
  live.add(child);
  child.once('exit', () => live.delete(child));
}

/** A server's data folder, until it is disposed of ({@link untrackFolder}). */
export function trackFolder(folder: string): void {
  installExitHook();
  folders.add(folder);
}

export function untrackFolder(folder: string): void {
  folders.delete(folder);
}

/** Whether a process still runs: not gone and not a zombie (this process reaps its children only on its event loop). */
function running(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.charAt(stat.lastIndexOf(')') + 2) !== 'Z';
  } catch {
    try {
      process.kill(pid, 0); // no /proc (not Linux): alive or a zombie
      return true;
    } catch {
      return false;
    }
  }
}

/**
 * Synchronously: SIGKILL every tracked server's process group (the postmaster and its
 * backends), wait up to 2 s for each postmaster to end (so that its port is free when this
 * returns), then delete every data folder not disposed of (killed: none of them writes again).
 */
export function stopAllNow(): void {
  const pids: number[] = [];
  for (const c of live) {
    if (!c.pid) continue;
    try {
      process.kill(-c.pid, 'SIGKILL');
      pids.push(c.pid);
    } catch {
      // already gone
    }
  }
  live.clear();
  const nap = new Int32Array(new SharedArrayBuffer(4));
  const until = performance.now() + 2000;
  while (pids.some(running) && performance.now() < until) Atomics.wait(nap, 0, 0, 10);
  for (const folder of folders) {
    try {
      fs.rmSync(folder, { recursive: true, force: true });
    } catch {
      // left to the OS's temporary-folder cleanup
    }
  }
  folders.clear();
}

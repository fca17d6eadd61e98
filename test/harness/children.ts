/** Child processes a test forks (candidates, workers): each leaves when the test ends. */
import type { ChildProcess } from 'node:child_process';
import { afterEach } from 'vitest';

/**
 * Register an afterEach that ends every process `track`ed during the test: disconnect (the
 * fixtures shut down cleanly on it), SIGKILL after `graceMs`. Returns `track`.
 */
export function useChildren(graceMs = 5000): (proc: ChildProcess) => ChildProcess {
  const children: ChildProcess[] = [];
  afterEach(async () => {
    await Promise.all(
      children.splice(0).map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            c.once('exit', () => resolve());
            if (c.connected) c.disconnect();
            setTimeout(() => c.kill('SIGKILL'), graceMs).unref();
          }),
      ),
    );
  });
  return (proc) => {
    proc.on('error', () => {}); // a send to a process that has just exited (EPIPE) is no failure
    children.push(proc);
    return proc;
  };
}

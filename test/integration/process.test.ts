/**
 * Each election in a process of its own, against real PostgreSQL: a started `LeaderLock` or
 * `PartitionedLeadership` keeps the process alive (through outages and back-offs) until
 * shutdown, after which nothing keeps it alive; `unref: true` lets it exit. (A partition
 * worker retrying its first connection let its process exit with code 0 until 2026-12-02.)
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ownServer } from '../harness/db.js';
import { fixtureArgs } from '../harness/fixture-bundle.js';

const FIXTURE = path.join(import.meta.dirname, '../fixtures/keep-alive.fixture.ts');
const UNREACHABLE = 'postgres://nobody:secret@127.0.0.1:1/none';

type Kind = 'lock' | 'partitions';

interface Child {
  proc: ChildProcess;
  out: string[];
  line(text: string): Promise<void>;
  exited: Promise<number | null>;
}

function child(url: string, mode: 'ref' | 'unref', kind: Kind): Child {
  const proc = spawn(process.execPath, [...fixtureArgs(FIXTURE), url, mode, kind], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const out: string[] = [];
  const waiters: [string, () => void][] = [];
  proc.stdout?.on('data', (d: Buffer) => {
    for (const l of d.toString().split('\n').filter(Boolean)) {
      out.push(l);
      for (const w of waiters.filter(([t]) => l.includes(t))) w[1]();
    }
  });
  return {
    proc,
    out,
    line: (text) =>
      out.some((l) => l.includes(text)) ? Promise.resolve() : new Promise((r) => waiters.push([text, r])),
    exited: new Promise((resolve) => proc.once('exit', (code) => resolve(code))),
  };
}

/** The claim is that nothing happens (no exit) for a while: this waits out that while. */
const quietFor = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe.each(['lock', 'partitions'] as const)(
  'a started %s keeps its process alive',
  { tags: ['node-line'] },
  (kind) => {
    it('while it retries an unreachable database; SIGTERM shuts it down and the process exits 0', async () => {
      const c = child(UNREACHABLE, 'ref', kind);
      await c.line('starting');
      await quietFor(1500); // about 15 back-offs of 100 ms
      expect(c.proc.exitCode).toBeNull();
      c.proc.kill('SIGTERM');
      expect(await c.exited).toBe(0);
      expect(c.out).toContain('shut down');
    });

    it('while its database is down after it led; SIGTERM then ends it with exit 0', async () => {
      await using server = await ownServer();
      const c = child(server.url, 'ref', kind);
      await c.line('in charge');
      await server.stop('fast');
      await c.line('out of charge');
      await quietFor(1500);
      expect(c.proc.exitCode).toBeNull();
      c.proc.kill('SIGTERM');
      expect(await c.exited).toBe(0);
    });

    it('with unref: true the process exits by itself while it is still started', async () => {
      const c = child(UNREACHABLE, 'unref', kind);
      expect(await c.exited).toBe(0);
      expect(c.out).toContain('starting');
      expect(c.out).not.toContain('shut down');
    });
  },
);

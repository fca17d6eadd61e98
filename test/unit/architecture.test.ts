/**
 * The folders show the architecture (CONTRIBUTING.md): imports point down only, with no
 * cycle (type-only imports included), and no source file grows past 400 lines. Read from the
 * source's own import statements.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = resolve(import.meta.dirname, '../../src');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

interface Import {
  readonly to: string;
  /** The statement as written. */
  readonly text: string;
}

/** Every relative import (and re-export) of a file, resolved to a path under src. */
function importsOf(file: string): Import[] {
  const text = readFileSync(file, 'utf8');
  const out: Import[] = [];
  for (const m of text.matchAll(/^(?:import|export)[^;]*?from\s+'(\.{1,2}\/[^']+)';/gms)) {
    out.push({ to: resolve(dirname(file), m[1] as string).replace(/\.js$/, '.ts'), text: m[0] });
  }
  return out;
}

const all = files(SRC);
const graph = new Map(all.map((f) => [f, importsOf(f)]));
const rel = (f: string) => relative(SRC, f);
const folder = (f: string) => rel(f).split('/')[0] as string;

describe('the source tree', () => {
  it('src/core imports nothing from above it', () => {
    const up = all
      .filter((f) => folder(f) === 'core')
      .flatMap((f) =>
        (graph.get(f) ?? []).filter((i) => folder(i.to) !== 'core').map((i) => `${rel(f)}: ${i.text}`),
      );
    expect(up).toEqual([]);
  });

  it('watch, partitions, testing, node-cron and ops take nothing from src/leader but the LeaderLock type', () => {
    const allowed = /^import type \{ LeaderLock \} from '\.\.\/leader\/leader-lock\.js';$/;
    const bad = all
      .filter((f) => ['watch', 'partitions', 'testing', 'node-cron', 'ops'].includes(folder(f)))
      .flatMap((f) =>
        (graph.get(f) ?? [])
          .filter((i) => folder(i.to) === 'leader' && !allowed.test(i.text))
          .map((i) => `${rel(f)}: ${i.text}`),
      );
    expect(bad).toEqual([]);
  });

  it('has no import cycle, type-only imports included', () => {
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const path: string[] = [];
    const visit = (f: string): void => {
      state.set(f, 'open');
      path.push(f);
      for (const { to } of graph.get(f) ?? []) {
        if (!graph.has(to)) continue;
        if (state.get(to) === 'open')
          cycles.push([...path.slice(path.indexOf(to)), to].map(rel).join(' -> '));
        else if (!state.has(to)) visit(to);
      }
      path.pop();
      state.set(f, 'done');
    };
    for (const f of all) if (!state.has(f)) visit(f);
    expect(cycles).toEqual([]);
  });

  it('reads time and sets timers only through src/core/clock.ts (the CLI aside): every loop runs on the injected clock', () => {
    const raw = all
      .filter((f) => !['core/clock.ts'].includes(rel(f)) && folder(f) !== 'cli')
      .flatMap((f) =>
        readFileSync(f, 'utf8')
          .split('\n')
          .map((line, i) => [line, i + 1] as const)
          .filter(([line]) => !/^\s*(\*|\/\/|\/\*)/.test(line))
          .filter(([line]) =>
            /\b(setTimeout|setInterval|setImmediate|Date\.now|performance\.now)\s*\(/.test(line),
          )
          .filter(([line]) => !/\bclock\.setTimeout\(/i.test(line))
          .map(([line, n]) => `${rel(f)}:${n}: ${line.trim()}`),
      );
    expect(raw).toEqual([]);
  });

  it('only the lifecycle writes the phase and the request box (docs/state-machine.md, "Where a state change is written")', () => {
    // an assignment to the loop's phase, to an attempt's session or delay, to a phase's
    // promotion or `after`, or any write to the Mailbox
    const write =
      /\bthis\.phase\s*=[^=]|\b(phase|p|prev|left|entered)\.(session|delayed|after|promotion)\s*(\?\?)?=[^=]|\bmail\.(\w+\s*(\?\?)?=[^=]|invite\(|uninvite\(|stopped\.abort\()/;
    const writers = all
      .filter((f) => folder(f) === 'leader')
      .flatMap((f) =>
        readFileSync(f, 'utf8')
          .split('\n')
          .map((line, i) => [line, i + 1] as const)
          .filter(([line]) => !/^\s*(\*|\/\/|\/\*)/.test(line) && write.test(line))
          .map(([line, n]) => `${rel(f)}:${n}: ${line.trim()}`),
      );
    expect(writers.filter((w) => !w.startsWith('leader/lifecycle.ts:'))).toEqual([]);
    expect(writers.length).toBeGreaterThan(5); // the pattern sees the lifecycle's own writes
  });

  it('has no file over 400 lines', () => {
    const long = all
      .map((f) => [rel(f), readFileSync(f, 'utf8').split('\n').length - 1] as const)
      .filter(([, n]) => n > 400);
    expect(long).toEqual([]);
  });
});

/**
 * Directed scenarios for the claims tests (claims*.test.ts): a fixed profile and plan on the
 * simulated server and network (`Options.fixed`), and the moments its trace records.
 */
import { expect } from 'vitest';
import type { WatchProfile } from './profile.js';
import { type Profile, runScenario, type Step } from './scenario.js';

/** The network: each message's delay drawn up to 1 ms (net.ts), no spikes. */
export const NET = { baseMs: 1, spikeP: 0, spikeMs: 0 };
export const DELAY_MS = 700;

/** The trace's moments: each candidate's grants and term starts, in simulated ms. */
export function moments(trace: readonly string[]) {
  const grants: { at: number; who: string }[] = [];
  const terms: { at: number; who: string }[] = [];
  for (const line of trace) {
    const at = Number(line.slice(0, line.indexOf(' ')));
    const grant = / granted to (\S+) pid /.exec(line);
    if (grant && !line.includes(' on server ')) grants.push({ at, who: grant[1] as string });
    const term = /^\S+ (\S+) body start term /.exec(line);
    if (term) terms.push({ at, who: term[1] as string });
  }
  return { grants, terms };
}

export async function directed(
  mode: 'wait' | 'poll',
  plan: Step[],
  extra: Partial<Profile> = {},
  sampleReadyMs?: number,
  watches?: WatchProfile[],
  /** The run's violations are the test's to read (a directed run that must fail). */
  violationsExpected = false,
) {
  const profile: Partial<Profile> = {
    mode,
    candidates: [
      { id: 'a', priority: 0 },
      { id: 'b', priority: 0 },
    ],
    healthIntervalMs: 200,
    queryTimeoutMs: 300,
    waitSliceMs: 1000,
    closeTimeoutMs: 100,
    takeoverDelayMs: DELAY_MS,
    retry: { kind: 'exponential', baseMs: 20, maxMs: 500 },
    net: NET,
    drainMaxMs: 0,
    chaosMs: 3000,
    ...extra,
  };
  const r = await runScenario(7, {
    trace: true,
    lockOnly: true,
    earlyTimers: false,
    fixed: {
      profile,
      plan,
      ...(sampleReadyMs === undefined ? {} : { sampleReadyMs }),
      ...(watches === undefined ? {} : { watches }),
    },
  });
  if (!violationsExpected) expect(r.violations).toEqual([]);
  return { ...moments(r.trace ?? []), trace: r.trace ?? [], violations: r.violations };
}

/** The term a grant opened: the first term start of its candidate at or after it. */
export function termAfter(terms: { at: number; who: string }[], grant: { at: number; who: string }) {
  const t = terms.find((x) => x.who === grant.who && x.at >= grant.at);
  if (!t) throw new Error(`no term after ${grant.who}'s grant at ${grant.at}`);
  return t.at - grant.at;
}

/** Three candidates of equal priority, `a`, `b` and `c`, and a plan's first steps starting them in turn. */
export const THREE = [
  { id: 'a', priority: 0 },
  { id: 'b', priority: 0 },
  { id: 'c', priority: 0 },
];
export const THREE_STARTED: Step[] = [
  { at: 0, op: 'start', who: 0 },
  { at: 100, op: 'start', who: 1 },
  { at: 150, op: 'start', who: 2 },
];

/** A trace line's simulated time. */
export const at = (l: string): number => Number(l.split(' ')[0]);

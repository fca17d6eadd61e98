/**
 * What a component of the compatibility suite is (scripts/compat.ts runs them), what it is
 * given, and the one build of dist/ that they share.
 */
import type { MajorFigures, Outcome } from './report.js';
import { run } from './vitest.js';

export { CLI_BUILT_ENV } from '../../test/harness/build-cli.js';

export interface Context {
  root: string;
  /** Environment for every child: the caller's, minus the suite's own switches. */
  env: NodeJS.ProcessEnv;
  /** Figures per PostgreSQL major, filled by the major components. */
  majors: MajorFigures[];
  /** Where this component's commands write (a file descriptor), else passed through. */
  out?: number | undefined;
  /** Test files at a time in each vitest run (`--maxWorkers`), else the config's (3). */
  maxWorkers?: number | undefined;
}

export interface Component {
  /** For picking components on the command line: `npm run test:compat -- pg14 node22`. */
  id: string;
  /** Spawns the built CLI or package (dist/): the driver builds it once before any such component starts. */
  usesBuild: boolean;
  /** Runs the compat project, whose setup installs PgBouncer and pgpool-II if missing: the driver does it first. */
  compatProject: boolean;
  /**
   * Mostly waits (timers, a 30 s promise, a pooler's or another runtime's round trips, npm):
   * 11–60 % of the 2 cores in CI, against 70–77 % for a Node.js line or a PostgreSQL major. The
   * driver runs these one after another in a lane of their own beside the others (a heavy lane
   * with nothing left takes them too).
   */
  light?: boolean;
  /** About how long it runs alone (s): the driver starts the longest first, so that the last to end is a short one. */
  seconds: number;
  run(ctx: Context): Promise<Omit<Outcome, 'ms'>>;
}

export const failed = (component: string, note: string): Omit<Outcome, 'ms'> => ({
  component,
  ok: false,
  passed: 0,
  total: 0,
  note,
});

/** `npm run build` once, for the smoke tests; resolves to null on success, else why not. */
let built: Promise<string | null> | null = null;
export function buildOnce(ctx: Context): Promise<string | null> {
  built ??= run('npm', ['run', 'build', '--silent'], { cwd: ctx.root, env: ctx.env, out: ctx.out }).then(
    (code) => (code === 0 ? null : `npm run build exited ${code}`),
  );
  return built;
}

/** dist/ was built from this tree before the suite started: {@link buildOnce} builds nothing. */
export function builtAlready(): void {
  built ??= Promise.resolve(null);
}

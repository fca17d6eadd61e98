/**
 * The package as it is published, a component of the suite: `npm run check:package` (publint,
 * attw under node16 resolution, the size budget, the smoke tests of the library and the CLI
 * from the packed tarball) and `npm run check:first-hour` (the README example from the packed
 * package in an empty project, twice, against a real server). Both mostly wait on npm and on
 * child processes (about 60 % of the 2 cores alone for 30 s, run AI), hence the light lane.
 * They check dist/ as the driver built it (built here if the driver's build failed), and pack
 * into folders of their own, except attw, which packs into the project folder under a name
 * of its own choosing and deletes it (no other component packs there).
 */
import { buildOnce, type Component, failed } from './component.js';
import { run } from './vitest.js';

const STEPS = ['check:package', 'check:first-hour'] as const;

export function packageComponent(): Component {
  const label =
    'the packed package: publint, attw (node16), size, smoke tests, the README example in an empty project (npm run check:package, check:first-hour)';
  return {
    id: 'package',
    seconds: 35,
    light: true,
    usesBuild: true,
    compatProject: false,
    async run(ctx) {
      const buildError = await buildOnce(ctx);
      if (buildError) return failed(label, buildError);
      const failures: string[] = [];
      for (const step of STEPS) {
        const code = await run('npm', ['run', step], { cwd: ctx.root, env: ctx.env, out: ctx.out });
        if (code !== 0) failures.push(`npm run ${step} exited ${code}`);
      }
      return {
        component: label,
        ok: failures.length === 0,
        passed: STEPS.length - failures.length,
        total: STEPS.length,
        ...(failures.length ? { note: failures.join('; ') } : {}),
      };
    },
  };
}

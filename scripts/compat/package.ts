/**
 * The package as it is published, a component of the suite: `npm run check:package` (publint,
 * attw under node16 resolution, the size budget, the smoke tests of the library and the CLI
 * from the packed tarball) and `npm run check:first-hour` (the README example from the packed
 * package in an empty project, twice, against a real server). Both mostly wait on npm and on
 * child processes (about 60 % of the 2 cores alone for 30 s, run AI), hence the light lane;
 * they spawn dist/ as built by the driver, and pack into folders of their own except attw,
 * which packs into the project (no other light component packs there meanwhile: one at a time).
 */
import type { Component } from './component.js';
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
      const failed: string[] = [];
      for (const step of STEPS) {
        const code = await run('npm', ['run', step], { cwd: ctx.root, env: ctx.env, out: ctx.out });
        if (code !== 0) failed.push(`npm run ${step} exited ${code}`);
      }
      return {
        component: label,
        ok: failed.length === 0,
        passed: STEPS.length - failed.length,
        total: STEPS.length,
        ...(failed.length ? { note: failed.join('; ') } : {}),
      };
    },
  };
}

/**
 * The order in which a vitest run starts its test files: vitest's own (the files that failed
 * last, then the longest by its cache of durations, else the largest), but with the projects
 * in the order of {@link PROJECT_RANK} instead of by name. By name the `sim` project came
 * after `integration`, so the simulation's 1,000-scenario file (30 s alone on one worker)
 * started when the integration files ended and was the run's tail, with two workers idle
 * beside it but for the unit files. Projects not named here keep their place after these.
 */
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Lower first: the projects with the longest single files, then the many short ones (unit last, to fill the tail). */
export const PROJECT_RANK: Readonly<Record<string, number>> = {
  sim: 0,
  integration: 1,
  contract: 2,
  model: 3,
  unit: 4,
};

const rank = (spec: TestSpecification): number => PROJECT_RANK[spec.project.name] ?? Number.MAX_SAFE_INTEGER;

export default class ProjectRankSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    // vitest's order within each project, kept; the projects reordered (a stable sort)
    const sorted = await super.sort(files);
    return sorted
      .map((spec, index) => ({ spec, index }))
      .sort(
        (a, b) =>
          a.spec.project.config.sequence.groupOrder - b.spec.project.config.sequence.groupOrder ||
          rank(a.spec) - rank(b.spec) ||
          a.index - b.index,
      )
      .map(({ spec }) => spec);
  }
}

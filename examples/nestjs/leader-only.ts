import { Injectable, Module, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { Cron, CronExpression, ScheduleModule } from '@nestjs/schedule';
import pg from 'pg';
import { LeaderLock } from 'pgleaderlock';
import { fireKey, type LeaderCoordinator, leaderCoordinator } from 'pgleaderlock/node-cron';

/** The service's lock, and the coordinator that claims each fire for its leader. */
@Injectable()
export class Leadership implements OnApplicationBootstrap, OnApplicationShutdown {
  readonly lock = new LeaderLock({ name: 'jobs', connectionString: process.env.DATABASE_URL, fencing: true });
  private readonly pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
  readonly coordinator: LeaderCoordinator = leaderCoordinator(this.lock, { pool: this.pool });

  async onApplicationBootstrap(): Promise<void> {
    await this.lock.start();
  }
  async onApplicationShutdown(): Promise<void> {
    await this.lock.shutdown();
    await this.pool.end();
  }
}

type Job = (this: { readonly leadership: Leadership }) => Promise<void>;

/**
 * Runs the @Cron method only on the leader, at most once per fire across replicas. Put it
 * below @Cron: decorators apply bottom-up, and @Cron must see the wrapped method.
 */
export function LeaderOnly(task: string) {
  return (_target: object, _method: string | symbol, descriptor: TypedPropertyDescriptor<Job>): void => {
    const job = descriptor.value;
    if (job === undefined) return;
    descriptor.value = async function () {
      // @nestjs/schedule does not pass the scheduled time: the fire's second on this clock
      const key = fireKey(task, new Date(Math.floor(Date.now() / 1000) * 1000));
      if (!(await this.leadership.coordinator.shouldRun(key))) return;
      try {
        await job.call(this);
      } finally {
        await this.leadership.coordinator.onComplete(key);
      }
    };
  };
}

@Injectable()
export class ReportJobs {
  constructor(readonly leadership: Leadership) {}

  @Cron(CronExpression.EVERY_DAY_AT_3AM, { name: 'nightly-report' })
  @LeaderOnly('nightly-report')
  async nightlyReport(): Promise<void> {
    console.log('building the report on the leader');
  }
}

@Module({ imports: [ScheduleModule.forRoot()], providers: [Leadership, ReportJobs] })
export class JobsModule {}

/**
 * Minimal stand-ins for the parts of `@nestjs/common` and `@nestjs/schedule` (v6) that
 * leader-only.ts uses, with their published signatures: enough to type-check the recipe
 * without installing NestJS. With NestJS installed, the real packages' types apply.
 */
declare module '@nestjs/common' {
  export function Injectable(): ClassDecorator;
  export function Module(metadata: {
    imports?: unknown[];
    providers?: unknown[];
    exports?: unknown[];
  }): ClassDecorator;
  export interface OnApplicationBootstrap {
    onApplicationBootstrap(): unknown;
  }
  export interface OnApplicationShutdown {
    onApplicationShutdown(signal?: string): unknown;
  }
}

declare module '@nestjs/schedule' {
  export enum CronExpression {
    EVERY_SECOND = '* * * * * *',
    EVERY_DAY_AT_3AM = '0 03 * * *',
  }
  export type CronOptions = {
    name?: string;
    timeZone?: string;
    waitForCompletion?: boolean;
    disabled?: boolean;
    threshold?: number;
  };
  export function Cron(cronTime: string | Date, options?: CronOptions): MethodDecorator;
  // biome-ignore lint/complexity/noStaticOnlyClass: NestJS's ScheduleModule is such a class
  export class ScheduleModule {
    static forRoot(): unknown;
  }
}

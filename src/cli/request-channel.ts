/**
 * The listening connection of `pgleaderlock resign` and `handover` (request.ts): it sends
 * the request on the key's channel and yields the events committed after it, in order.
 */
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { type HandoverEvent, parseEvent, requestPayload } from '../core/handover.js';
import { CliExit, EXIT, explain } from './common.js';

export type Request = { kind: 'resign' } | { kind: 'handover'; to: string };

/** An event on the key's channel, with when it arrived (ms after the request was sent). */
export interface Heard {
  event: HandoverEvent;
  atMs: number;
}

/** The listening connection: events after this command's own request, in commit order. */
export class Channel {
  private readonly heard: Heard[] = [];
  private waiter: (() => void) | null = null;
  private gone: Error | null = null;
  private sentAt = 0;
  /** Our request came back to us: events after it are its consequences. */
  private echoed = false;
  private pid = 0;

  constructor(
    readonly client: pg.Client,
    readonly name: string,
  ) {}

  async listen(): Promise<void> {
    this.client.on('notification', (msg) => {
      if (msg.channel !== this.name || msg.payload === undefined) return;
      const event = parseEvent(msg.payload);
      if (event === null) return;
      if (!this.echoed) {
        // our own NOTIFY: every event committed after it comes after it, in commit order
        if (msg.processId === this.pid && (event.kind === 'resign' || event.kind === 'handover'))
          this.echoed = true;
        return;
      }
      this.heard.push({ event, atMs: performance.now() - this.sentAt });
      this.wake();
    });
    const fail = (err: Error): void => {
      this.gone ??= err;
      this.wake();
    };
    this.client.on('error', fail);
    this.client.on('end', () => fail(new Error('the connection closed')));
    await this.client.query(`LISTEN ${this.name}`);
    const { rows } = await this.client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    this.pid = rows[0]?.pid ?? 0;
  }

  async send(request: Request): Promise<void> {
    const payload = requestPayload(request.kind === 'resign' ? null : { to: request.to });
    this.sentAt = performance.now();
    await this.client.query('SELECT pg_notify($1, $2)', [this.name, payload]);
  }

  /** The next event after the request, or null once `deadline` (performance.now()) has passed. */
  async next(deadline: number): Promise<Heard | null> {
    for (;;) {
      const first = this.heard.shift();
      if (first) return first;
      if (this.gone) {
        throw new CliExit(
          EXIT.NOT_ACQUIRED,
          `lost the connection while waiting for the outcome (${explain(this.gone)}); look with status`,
          {
            cause: this.gone,
          },
        );
      }
      const left = deadline - performance.now();
      if (left <= 0) return null;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.waiter = null;
    }
  }

  private wake(): void {
    this.waiter?.();
  }
}

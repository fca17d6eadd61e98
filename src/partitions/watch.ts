/**
 * The ring watch: each worker queues, on a session of its own, for the member lock of the
 * member after it (ids sorted, wrapping). The server grants that lock the moment the
 * member's session ends (a crash, SIGKILL, `pg_terminate_backend`, a server-side timeout of a
 * frozen worker), so the death is known within milliseconds, with no time-to-live to wait
 * out. The watcher frees the lock again at once and reports the death; the worker then
 * tells everyone (NOTIFY). The wait is in slices (`lock_timeout`): about one statement per
 * slice, and a new target is taken up by cancelling the wait.
 */
import type pg from 'pg';
import { sendCancel } from '../cancel.js';
import { systemClock } from '../clock.js';
import type { ConnectFn } from '../connect.js';
import { destroyClient } from '../connect.js';
import { sqlStateOf } from '../errors.js';

export interface WatchOptions {
  connect: ConnectFn;
  /** Key1 of the member locks. */
  membersKey: number;
  appName: string;
  sliceMs: number;
  queryTimeoutMs: number;
  /** Session settings (keepalives, client_connection_check_interval) as on the ownership session. */
  settings: readonly [name: string, value: string][];
  /** The member in `slot` has gone. */
  onDeath: (slot: number) => void;
  onError: (error: Error) => void;
  /** Counts statements (stats). */
  onStatement: () => void;
}

type Target = { slot: number } | null;

export class Watcher {
  private target: Target = null;
  private client: pg.Client | null = null;
  private waiting: number | null = null;
  private stopped = false;
  private changed: (() => void) | null = null;
  private recancel: NodeJS.Timeout | null = null;
  private readonly done: Promise<void>;

  constructor(private readonly o: WatchOptions) {
    this.done = this.loop();
  }

  /** Watch `slot` (the successor), or nobody (alone). Cancels a wait on another slot. */
  watch(slot: number | null): void {
    if ((this.target?.slot ?? null) === slot) return;
    this.target = slot === null ? null : { slot };
    this.changed?.();
    this.retarget();
  }

  /**
   * Cancel a wait on a slot that is no longer the target; again every 50 ms until the wait
   * has ended (a cancel that reaches the server before the statement does is lost).
   */
  private retarget(): void {
    const stale = (): boolean =>
      this.client !== null && this.waiting !== null && this.waiting !== (this.target?.slot ?? null);
    if (!stale() || this.recancel) return;
    const client = this.client as pg.Client;
    void sendCancel(client, systemClock, this.o.queryTimeoutMs);
    this.recancel = setInterval(() => {
      if (!stale() || this.client !== client) {
        clearInterval(this.recancel ?? undefined);
        this.recancel = null;
        return;
      }
      void sendCancel(client, systemClock, this.o.queryTimeoutMs);
    }, 50);
    this.recancel.unref();
  }

  async close(): Promise<void> {
    this.stopped = true;
    if (this.recancel) clearInterval(this.recancel);
    this.recancel = null;
    this.changed?.();
    if (this.client) destroyClient(this.client);
    await this.done;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      const target = this.target;
      if (!target) {
        await new Promise<void>((resolve) => {
          this.changed = resolve;
        });
        this.changed = null;
        continue;
      }
      try {
        const client = await this.session();
        if (this.target?.slot !== target.slot) continue; // retargeted while connecting
        this.waiting = target.slot;
        this.o.onStatement();
        await client.query('/* pgleaderlock:watch */ SELECT pg_advisory_lock($1, $2)', [
          this.o.membersKey,
          target.slot,
        ]);
        this.waiting = null;
        // granted: the member's session has ended. Free its slot again at once (again if a
        // late cancel meant for the wait cancels the unlock)
        for (let freed = false; !freed; ) {
          this.o.onStatement();
          freed = await client
            .query('/* pgleaderlock:watch */ SELECT pg_advisory_unlock($1, $2)', [
              this.o.membersKey,
              target.slot,
            ])
            .then(
              () => true,
              (err: unknown) => {
                if (sqlStateOf(err) === '57014') return false;
                throw err;
              },
            );
        }
        if (this.target?.slot === target.slot) this.target = null;
        this.o.onDeath(target.slot);
      } catch (err) {
        this.waiting = null;
        const state = sqlStateOf(err);
        if (state === '55P03' || state === '57014') continue; // slice over, or cancelled to retarget
        if (this.stopped) break;
        if (this.client) destroyClient(this.client);
        this.client = null;
        this.o.onError(err as Error);
        await new Promise((r) => setTimeout(r, 500).unref());
      }
    }
  }

  private async session(): Promise<pg.Client> {
    if (this.client) return this.client;
    const client = await this.o.connect();
    client.on('error', () => {
      if (this.client === client) this.client = null;
    });
    const wanted: [string, string][] = [
      ...this.o.settings,
      ['application_name', this.o.appName],
      ['lock_timeout', String(this.o.sliceMs)],
    ];
    const calls = wanted.map((_, i) => `set_config($${2 * i + 1}, $${2 * i + 2}, false)`).join(', ');
    this.o.onStatement();
    await client.query(`/* pgleaderlock:configure */ SELECT ${calls}`, wanted.flat());
    if (this.stopped) {
      destroyClient(client);
      throw new Error('stopped');
    }
    this.client = client;
    return client;
  }
}

/**
 * What follows a grant before its term may open, in ACQUIRING and RECONNECTING: the fencing
 * epoch is bumped (with fencing), the other configured hosts are asked whether one is a
 * newer primary, and, unless the handover is proven clean (handover.ts; with fencing, also
 * the epoch row), the lock is held for the takeover delay (`takeoverDelayMs`, docs/safety.md,
 * "Takeover delay"), its ownership checked meanwhile. The phase carries the delay while it
 * runs (`state` reads `pending`): the step that called is told when it begins, and hands it
 * to the loop (`TakeoverDelayed`, fsm.ts). Nothing here writes a phase.
 */
import { sleep } from '../core/clock.js';
import { ConnectionError, LockError, toError } from '../core/errors.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import { PEER_INTERVAL_MS, probePeers, splitBrainDelayMs, termDelayMs } from '../core/peers.js';
import { type Input, STOP } from './fsm.js';
import type { Grant } from './leadership.js';
import type { MailView, TakeoverDelay } from './phase.js';
import type { Session } from './session.js';
import type { Acquired, Epoch } from './session-types.js';
import type { StepContext } from './step-context.js';

/** Told when a takeover delay begins; the attempt goes on once the loop has applied it. */
export type DelayBegins = (delay: TakeoverDelay) => Promise<void>;

export class Takeover {
  constructor(
    private readonly o: ResolvedOptions,
    private readonly mail: MailView,
    private readonly ctx: Pick<StepContext, 'arm'>,
  ) {}

  /**
   * After a grant: bump the fencing epoch (with fencing), ask the other hosts, then hold the
   * lock for the takeover delay unless none is needed. Returns the grant the term opens
   * with, or the input that ends the attempt (a stop, a failed query, a newer primary:
   * `ConnectFailed`, whose session the caller closes).
   */
  async complete(session: Session, acquired: Acquired, delayed: DelayBegins): Promise<Grant | Input> {
    let epoch: Epoch | null;
    try {
      epoch = this.o.fencingTable ? await session.bumpEpoch(this.o.fencingTable, this.o.id) : null;
    } catch (err) {
      return this.mail.stop ? STOP : { type: 'DbError', error: toError(err) };
    }
    if (this.mail.stop) return STOP;
    const clean = acquired.cleanHandover || epoch?.previousReleased === true;
    // Several hosts configured: ask the others first, whatever the handover. A clean
    // handover on an old primary (its last leader stepped down before it saw the promotion)
    // proves nothing about the promoted server, whose leader may already be working.
    const peers = await probePeers(
      session.place.others.map((o) => o.endpoint),
      this.o.clock,
      this.mail.stopped.signal,
    );
    if (this.mail.stop) return STOP;
    const { timeline, host } = session.place;
    const newer = peers.find(
      // timeline 0: unknown on this server (primary.ts), nothing to compare
      (p): p is { kind: 'primary'; timeline: number } =>
        timeline > 0 && p.kind === 'primary' && p.timeline > timeline,
    );
    if (newer) {
      // an old primary still up: the caller leaves it; the next survey finds the new one
      const error = new LockError(
        `another configured host is a primary on timeline ${newer.timeline}, newer than ${host} (timeline ${timeline}): a standby was promoted; moving to the new primary`,
        { code: 'ERR_PGLEADERLOCK_UNSAFE' },
      );
      return { type: 'ConnectFailed', error };
    }
    // Another host is still a primary (an older timeline: the survey moments ago, or the
    // probe, said so): a leader there may not have seen this server's promotion yet; it
    // will within PEER_BOUND_MS (peers.ts), and then stop its work (`splitBrainDelayMs`). That holds whatever the handover on this server
    // proved (a clean release replicated from the old primary proves nothing about it), and
    // is not turned off by takeoverDelayMs: 0. A host that does not answer proves nothing
    // either way (docs/safety.md, "Primary failover", limits).
    const split =
      peers.some((p) => p.kind === 'primary') || session.place.others.some((o) => o.state.kind === 'primary');
    // (A clean handover proves the previous holder on this server stopped; the old leader
    // on the other primary is another matter: its work gets the full delay after the bound.)
    const delayMs = termDelayMs(
      this.o.takeoverDelayMs,
      clean,
      split ? splitBrainDelayMs(this.o.takeoverDelayMs, PEER_INTERVAL_MS) : 0,
    );
    if (clean && !split)
      this.o.logger.debug(
        {
          event: 'takeover_clean',
          released: acquired.cleanHandover,
          fencing: epoch?.previousReleased === true,
        },
        'takeover_clean',
      );
    const proven =
      delayMs === 0
        ? { sentAt: acquired.provenAt, safety: acquired.safety }
        : await this.waitOut(session, delayMs, !split, delayed);
    if ('type' in proven) return proven;
    // The session died since the grant (a process frozen on its grant reads the grant and
    // the reset together as it thaws; the server has freed the lock then): no term opens on
    // it, even with the lease left. The lifecycle applies this step's input before any
    // further I/O event can arrive, so a session alive here is alive as the term opens.
    if (session.dead) {
      const cause = session.cause;
      return {
        type: 'DbError',
        error: new ConnectionError('the connection ended after the grant, before the term could open', {
          cause,
        }),
      };
    }
    return { ...proven, epoch: epoch?.epoch ?? null };
  }

  /**
   * The takeover delay (docs/safety.md): hold the lock `delayMs` before the term may open,
   * checking ownership at once and every health interval (tagged `pending`, which `inspect`
   * shows), then once more: the lease counts from that last check. `drainEnds`: a proof of
   * drain from the previous holder (handover.ts) ends the delay early (not while another
   * primary is up: nothing heard on this server proves anything about that one).
   */
  private async waitOut(
    session: Session,
    delayMs: number,
    drainEnds: boolean,
    delayed: DelayBegins,
  ): Promise<Omit<Grant, 'epoch'> | Input> {
    const { clock } = this.o;
    const until = clock.now() + delayMs;
    await delayed({ until, delayMs });
    for (;;) {
      const signal = this.ctx.arm();
      if (this.mail.stop) return STOP;
      const left = until - clock.now();
      const sentAt = clock.now();
      let result: Awaited<ReturnType<Session['check']>>;
      try {
        result = await session.check(left > 0);
      } catch (err) {
        return { type: 'DbError', error: toError(err) };
      }
      if (!result.ok) {
        return { type: 'DbError', error: new LockError(result.reason, { code: 'ERR_PGLEADERLOCK_LOST' }) };
      }
      if (left <= 0) return { sentAt, safety: result.safety };
      const proof = drainEnds ? session.drainProof() : null;
      if (proof !== null) {
        this.o.logger.debug({ event: 'takeover_drained', leftMs: left, ...proof }, 'takeover_drained');
        return { sentAt, safety: result.safety };
      }
      await sleep(clock, Math.min(this.o.healthIntervalMs, left), signal);
    }
  }
}

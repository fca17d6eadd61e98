/**
 * The configured hosts as endpoints: one per host of a libpq-style multi-host connection
 * (hosts.ts), each with its own `connect` (primary.ts surveys them).
 */
import type { ConnectFn } from './connect.js';
import { defaultConnect } from './connect.js';
import { configFor, describeHosts, parseTargets, type TargetsInput } from './hosts.js';

/** One configured host: how to connect to it, and its name in messages (no password). */
export interface Endpoint {
  readonly label: string;
  /**
   * Opens a session. The default connection opens it as `applicationName` when given (else
   * as the owner's name), so that a second session (a partition worker's ring watch) never
   * shows under the first's name; a `connect` hook is called with no argument, and the
   * session setup renames its connection (prepare.ts).
   */
  readonly connect: EndpointConnect;
  /** The host, port and user as configured (none for a `connect` hook): providers.ts names a known pooled endpoint from them. */
  readonly target?: { host: string; port: number; user?: string | undefined };
}

/**
 * An endpoint's `connect`: the `connect` option, or the default one, which can be given the
 * session's name, and a signal that abandons the attempt (a `connect` hook is given neither:
 * a client it resolves after the signal is closed by the caller).
 */
export type EndpointConnect = (
  applicationName?: string,
  signal?: AbortSignal,
  /** The attempt's deadline, when it is not the lock's `queryTimeoutMs` (core/primary.ts). */
  timeoutMs?: number,
) => ReturnType<ConnectFn>;

/**
 * One endpoint per host of a libpq-style multi-host connection (hosts.ts): the connection
 * string, `clientConfig.host`/`port` or `PGHOST`/`PGPORT`. `target_session_attrs` may only
 * ask for a primary: the lock never runs on a standby.
 */
export function endpointsOf(
  input: Pick<TargetsInput, 'connectionString' | 'clientConfig'>,
  appName: string,
  timeoutMs: number,
): Endpoint[] {
  const targets = parseTargets({
    ...(input.connectionString === undefined ? {} : { connectionString: input.connectionString }),
    ...(input.clientConfig === undefined ? {} : { clientConfig: input.clientConfig }),
  });
  const attrs = targets.targetSessionAttrs;
  if (attrs !== null && !['any', 'read-write', 'primary'].includes(attrs)) {
    throw new TypeError(
      `target_session_attrs=${attrs} (from ${targets.targetSessionAttrsFrom}) cannot be used: the lock only ever runs on a primary (any, read-write and primary are accepted and mean that)`,
    );
  }
  return targets.hosts.map((target) => ({
    label: describeHosts([target]),
    connect: defaultConnect(configFor(targets, target), appName, timeoutMs),
    target: { ...target, user: typeof targets.config.user === 'string' ? targets.config.user : undefined },
  }));
}

/**
 * `probes(target)`: the HTTP endpoints of a lock or a partition worker as one `node:http`
 * request listener: `/healthz` (liveness), `/readyz` (readiness) and `/metrics` (Prometheus
 * text). `http.createServer(probes(lock))`, a route of Express or Fastify, or
 * `pgleaderlock run --http` (docs/observability.md, "Probes over HTTP").
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { show } from '../core/validate.js';
import { LockMetrics, type MetricsTarget } from './metrics.js';

/** Options of {@link probes}. */
export interface ProbesOptions<T extends MetricsTarget> {
  /**
   * The metrics `/metrics` serves. Default: a `new LockMetrics(target)` made by `probes()`,
   * attached for as long as the target lives (call `probes()` before `start()` so that it
   * counts every transition). Pass your own to `close()` it when you are done.
   */
  metrics?: LockMetrics<T>;
}

/**
 * A `node:http` request listener. With a third argument (Express, Connect), a path other
 * than the three is passed on to `next()` instead of answered 404.
 */
export type ProbesListener = (
  req: IncomingMessage,
  res: ServerResponse,
  next?: (error?: unknown) => void,
) => void;

const PATHS = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * Serve `target`'s probes: `GET /healthz` answers 200 while `health().live`, else 503;
 * `GET /readyz` 200 while `health().ready`, else 503; both with `{ id, ...health() }` as
 * JSON (the reasons included). `GET /metrics`: `LockMetrics.prometheus()`. `HEAD` answers
 * the same without a body; other methods 405, other paths 404.
 *
 * ```ts
 * http.createServer(probes(lock)).listen(9464);
 * ```
 */
export function probes<T extends MetricsTarget>(target: T, options: ProbesOptions<T> = {}): ProbesListener {
  // the public shape, not `instanceof`: the test fakes pass, and so does a lock made by the
  // other build when both the ESM and the CommonJS one are loaded
  const t = target as unknown as Record<string, unknown> | null;
  if (typeof t !== 'object' || t === null || typeof t.health !== 'function' || typeof t.id !== 'string') {
    throw new TypeError(
      `probes needs a LeaderLock, a PartitionedLeadership or an object of their shape (id, health()), received ${show(target)}`,
    );
  }
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`probes options must be an object, received ${show(options)}`);
  }
  const given = options.metrics as unknown as Record<string, unknown> | undefined;
  if (
    given !== undefined &&
    (typeof given !== 'object' || given === null || typeof given.prometheus !== 'function')
  ) {
    throw new TypeError(`probes metrics must be a LockMetrics, received ${show(options.metrics)}`);
  }
  // a target without stats() (the fakes) has no metrics: /metrics answers 404 then
  const metrics: Pick<LockMetrics<MetricsTarget>, 'prometheus'> | null =
    options.metrics ?? (typeof t.stats === 'function' ? new LockMetrics<MetricsTarget>(target) : null);
  return (req, res, next) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const reply = (
      status: number,
      type: string,
      body: string,
      headers: Record<string, string> = {},
    ): void => {
      res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', ...headers });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (!PATHS.has(path) && typeof next === 'function') {
      next();
      return;
    }
    try {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        reply(405, 'text/plain', 'GET or HEAD only\n', { allow: 'GET, HEAD' });
      } else if (path === '/healthz' || path === '/readyz') {
        const health = target.health();
        const ok = path === '/healthz' ? health.live : health.ready;
        reply(ok ? 200 : 503, 'application/json', `${JSON.stringify({ id: target.id, ...health })}\n`);
      } else if (path === '/metrics' && metrics) {
        reply(200, 'text/plain; version=0.0.4; charset=utf-8', metrics.prometheus());
      } else if (path === '/metrics') {
        reply(404, 'text/plain', 'no metrics: the target has no stats() (a test fake)\n');
      } else {
        reply(404, 'text/plain', 'not found: try /healthz, /readyz or /metrics\n');
      }
    } catch (err) {
      // a probe must never take the process down (a request listener's throw is uncaught)
      if (!res.headersSent)
        reply(500, 'text/plain', `probe failed: ${(err as Error)?.message ?? String(err)}\n`);
      else res.destroy();
    }
  };
}

/**
 * `probes(target)`: the HTTP endpoints of a lock or a partition worker as one `node:http`
 * request listener: `/healthz` (liveness), `/readyz` (readiness) and `/metrics` (Prometheus
 * text). `http.createServer(probes(lock))`, a route of Express or Fastify, or
 * `pgleaderlock run --http` (docs/observability.md, "Probes over HTTP").
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { show } from '../core/validate.js';
import { LeaderLock } from '../leader/leader-lock.js';
import { PartitionedLeadership } from '../partitions/partitioned.js';
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
  if (!(target instanceof LeaderLock || target instanceof PartitionedLeadership)) {
    throw new TypeError(`probes needs a LeaderLock or a PartitionedLeadership, received ${show(target)}`);
  }
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`probes options must be an object, received ${show(options)}`);
  }
  if (options.metrics !== undefined && !(options.metrics instanceof LockMetrics)) {
    throw new TypeError(`probes metrics must be a LockMetrics, received ${show(options.metrics)}`);
  }
  const metrics = options.metrics ?? new LockMetrics<MetricsTarget>(target);
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
      } else if (path === '/metrics') {
        reply(200, 'text/plain; version=0.0.4; charset=utf-8', metrics.prometheus());
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

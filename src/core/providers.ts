/**
 * Managed PostgreSQL endpoints recognised from the host name and port alone (docs/deploy.md,
 * "Managed PostgreSQL"): which provider, which kind of endpoint (direct, session pooler,
 * transaction pooler, proxy, an address that moves on failover, a read-only endpoint), what the
 * lock does there and which endpoint to use instead. Pure: no network, no DNS, so that
 * `pgleaderlock doctor --offline` can judge a string for a host it cannot reach.
 *
 * The patterns follow the providers' documented host names (cited in docs/deploy.md). A host
 * that matches none gives null: the string alone says nothing, the connection checks decide.
 */

/** What the lock does on an endpoint. */
export type EndpointVerdict =
  /** The lock refuses it (ERR_PGLEADERLOCK_UNSAFE), or it can never hold a lock that excludes anyone. */
  | 'refused'
  /** The lock works there. */
  | 'works'
  /** The lock works there, with a caveat the reason names. */
  | 'caveat'
  /** The string alone cannot tell. */
  | 'unknown';

export type EndpointMode =
  | 'direct'
  | 'session pooler'
  | 'transaction pooler'
  | 'proxy'
  | 'writer endpoint (address moves on failover)'
  | 'read-only endpoint'
  | 'unknown';

export interface EndpointAdvice {
  provider: string;
  /** The endpoint as the provider names it. */
  endpoint: string;
  mode: EndpointMode;
  verdict: EndpointVerdict;
  /** What the lock does there, and why. */
  reason: string;
  /** The endpoint to use (`host:port`, `<ref>` where the string does not say). */
  use: string;
}

const LOCAL = /^(localhost|127(?:\.\d{1,3}){3}|::1|\[::1\])$/i;

/** Supabase: `aws-<n>-<region>.pooler.supabase.com` (Supavisor), `db.<ref>.supabase.co` (direct). */
function supabase(host: string, port: number, user: string | undefined): EndpointAdvice | null {
  const ref = /^postgres\.([a-z0-9]+)$/i.exec(user ?? '')?.[1] ?? '<project-ref>';
  const direct = `db.${ref}.supabase.co:5432`;
  if (/\.pooler\.supabase\.com$/i.test(host)) {
    const base = { provider: 'Supabase', endpoint: 'shared pooler (Supavisor)' };
    if (port === 6543) {
      return {
        ...base,
        mode: 'transaction pooler',
        verdict: 'refused',
        reason:
          'port 6543 is transaction mode: clients share backends, session advisory locks do not exclude, the lock refuses it',
        use: `${host}:5432 (the same pooler in session mode) or the direct host ${direct}`,
      };
    }
    if (port === 5432) {
      return {
        ...base,
        mode: 'session pooler',
        verdict: 'works',
        reason:
          'port 5432 is session mode: each client keeps its own backend, the lock works (with one probe connection per attempt); keepalive and tcp_user_timeout act on the pooler, not on this client',
        use: `${host}:5432, or the direct host ${direct} (IPv6 unless the project has the IPv4 add-on)`,
      };
    }
    return {
      ...base,
      mode: 'unknown',
      verdict: 'unknown',
      reason: `port ${port} is neither 5432 (session mode) nor 6543 (transaction mode)`,
      use: `${host}:5432 (session mode) or ${direct}`,
    };
  }
  const m = /^db\.([a-z0-9]+)\.supabase\.co$/i.exec(host);
  if (!m) return null;
  const own = `db.${m[1]}.supabase.co:5432`;
  if (port === 6543) {
    return {
      provider: 'Supabase',
      endpoint: 'dedicated pooler (PgBouncer)',
      mode: 'transaction pooler',
      verdict: 'refused',
      reason:
        'port 6543 on the database host is the dedicated PgBouncer in transaction mode: clients share backends, the lock refuses it',
      use: own,
    };
  }
  return {
    provider: 'Supabase',
    endpoint: 'direct connection',
    mode: port === 5432 ? 'direct' : 'unknown',
    verdict: port === 5432 ? 'works' : 'unknown',
    reason:
      port === 5432
        ? 'the database itself: the lock works, and its keepalive and tcp_user_timeout settings apply'
        : `port ${port} is not the direct port 5432`,
    use: own,
  };
}

/** Neon: `ep-<name>-<id>[-pooler].<region>.<cloud>.neon.tech`. */
function neon(host: string, port: number): EndpointAdvice | null {
  const m = /^(ep-[a-z0-9-]+?)(-pooler)?(\..+)?\.neon\.tech$/i.exec(host);
  if (!m) return null;
  const direct = `${m[1]}${m[3] ?? ''}.neon.tech:${port}`;
  if (m[2]) {
    return {
      provider: 'Neon',
      endpoint: 'pooled connection (PgBouncer)',
      mode: 'transaction pooler',
      verdict: 'refused',
      reason:
        "'-pooler' after the endpoint id is Neon's PgBouncer in transaction mode: clients share backends, session advisory locks do not exclude, the lock refuses it",
      use: `${direct} (the same endpoint without -pooler)`,
    };
  }
  return {
    provider: 'Neon',
    endpoint: 'direct connection',
    mode: 'direct',
    verdict: 'caveat',
    reason:
      "the compute itself: the lock works; a suspend (scale to zero) or a restart of the compute ends every session, so the leader loses the lock and the next session elects once the compute is active again; the lock's own queries count as activity, so a running lock probably keeps the compute from scaling to zero",
    use: direct,
  };
}

/** Azure Database for PostgreSQL flexible server: `<server>.postgres.database.azure.com`, PgBouncer on 6432. */
function azure(host: string, port: number): EndpointAdvice | null {
  if (!/\.postgres\.database\.azure\.com$/i.test(host)) return null;
  const direct = `${host}:5432`;
  if (port === 6432) {
    return {
      provider: 'Azure Database for PostgreSQL flexible server',
      endpoint: 'built-in PgBouncer',
      mode: 'transaction pooler',
      verdict: 'refused',
      reason:
        'port 6432 is the built-in PgBouncer, in transaction mode by default (pgbouncer.pool_mode): clients share backends, the lock refuses it',
      use: `${direct} (direct)`,
    };
  }
  return {
    provider: 'Azure Database for PostgreSQL flexible server',
    endpoint: 'direct connection',
    mode: port === 5432 ? 'direct' : 'unknown',
    verdict: port === 5432 ? 'works' : 'unknown',
    reason:
      port === 5432
        ? 'the server itself: the lock works; with high availability, a failover moves this name to the promoted standby (an address that moves)'
        : `port ${port} is neither 5432 (direct) nor 6432 (PgBouncer)`,
    use: direct,
  };
}

/** AWS: RDS Proxy, Aurora cluster (writer), reader and custom endpoints, RDS instances. */
function aws(host: string, port: number): EndpointAdvice | null {
  const m =
    /^([a-z0-9-]+)\.(proxy-|cluster-ro-|cluster-custom-|cluster-)?([a-z0-9]+)\.([a-z0-9-]+)\.rds\.amazonaws\.com(\.cn)?$/i.exec(
      host,
    );
  if (!m) return null;
  const [, name, kind, , region, cn = ''] = m;
  const rest = `<id>.${region}.rds.amazonaws.com${cn}:${port}`;
  switch (kind?.toLowerCase()) {
    case 'proxy-':
      return {
        provider: 'AWS RDS Proxy',
        endpoint: 'proxy endpoint',
        mode: 'proxy',
        verdict: 'caveat',
        reason:
          'RDS Proxy multiplexes transactions unless it pins the session; the lock checks at connect and while leading that its backend is its own and refuses it otherwise; a proxy that does not pass cancel requests on leaves a waiting follower to its lock_timeout',
        use: `the cluster (writer) endpoint ${name}.cluster-${rest} or the instance endpoint`,
      };
    case 'cluster-ro-':
      return {
        provider: 'Amazon Aurora',
        endpoint: 'reader endpoint',
        mode: 'read-only endpoint',
        verdict: 'refused',
        reason:
          'the reader endpoint leads to Aurora Replicas, which are read-only: the lock refuses a server in recovery',
        use: `the cluster (writer) endpoint ${name}.cluster-${rest}`,
      };
    case 'cluster-custom-':
      return {
        provider: 'Amazon Aurora',
        endpoint: 'custom endpoint',
        mode: 'unknown',
        verdict: 'unknown',
        reason:
          'a custom endpoint leads to the instances chosen for it, writer or readers: the string does not say which; the lock refuses a replica',
        use: `the cluster (writer) endpoint ${name}.cluster-${rest}`,
      };
    case 'cluster-':
      return {
        provider: 'Amazon Aurora',
        endpoint: 'cluster (writer) endpoint',
        mode: 'writer endpoint (address moves on failover)',
        verdict: 'caveat',
        reason:
          'the writer: the lock works; on failover the name moves to the promoted replica, and the lock cannot see the old writer through it (no multi-host guard, no promotion guard)',
        use: `${host}:${port}`,
      };
    default:
      return {
        provider: 'AWS RDS',
        endpoint: 'DB instance endpoint',
        mode: 'direct',
        verdict: 'works',
        reason:
          'the instance itself: the lock works; a Multi-AZ failover moves this name to the standby (an address that moves)',
        use: `${host}:${port}`,
      };
  }
}

/** A local address: PostgreSQL itself, a sidecar pooler, or a Cloud SQL Auth Proxy or connector. */
function local(host: string, port: number): EndpointAdvice | null {
  if (!LOCAL.test(host) && !host.startsWith('/')) return null;
  return {
    provider: 'unknown (a local address)',
    endpoint: host.startsWith('/') ? 'Unix socket' : 'local address',
    mode: 'unknown',
    verdict: 'unknown',
    reason:
      `${host}:${port} may be PostgreSQL itself, a pooler beside the service, or a Cloud SQL Auth Proxy or connector (a tunnel that keeps each session); ` +
      'the string alone cannot tell, and what is behind a local proxy (Cloud SQL managed connection pooling, for one) shows only when connecting',
    use: 'run pgleaderlock doctor without --offline from where the service runs',
  };
}

/**
 * The provider and kind of endpoint of `host:port`, from the documented host names; null when
 * no pattern matches. `user` fills in the Supabase project ref (`postgres.<ref>`) where known.
 */
export function judgeEndpoint(host: string, port: number, user?: string): EndpointAdvice | null {
  const h = host.trim().replace(/\.$/, '');
  return supabase(h, port, user) ?? neon(h, port) ?? azure(h, port) ?? aws(h, port) ?? local(h, port);
}

/** One sentence for a refusal's message: what the endpoint is and which to use; null if not a known refused endpoint. */
export function refusalAdvice(host: string, port: number, user?: string): string | null {
  const a = judgeEndpoint(host, port, user);
  if (a?.verdict !== 'refused') return null;
  return `${host}:${port} is ${a.provider}'s ${a.endpoint} (${a.mode}): use ${a.use}`;
}

/**
 * A refusal (`ERR_PGLEADERLOCK_UNSAFE`) on a known pooled or read-only endpoint: its message
 * gains which endpoint it is and which to use. Anything else is returned as it is.
 */
export function withEndpointAdvice<E>(
  err: E,
  target: { host: string; port: number; user?: string | undefined } | undefined,
): E {
  if (!target || !(err instanceof Error) || (err as { code?: unknown }).code !== 'ERR_PGLEADERLOCK_UNSAFE')
    return err;
  const advice = refusalAdvice(target.host, target.port, target.user);
  if (advice && !err.message.includes(advice)) err.message = `${err.message}; ${advice}`;
  return err;
}

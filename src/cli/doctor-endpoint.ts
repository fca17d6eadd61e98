/**
 * The first check of `pgleaderlock doctor`: the connection string judged from its hosts and
 * ports alone (core/providers.ts), before anything connects. It names the provider, the kind
 * of endpoint and the endpoint to use, so a string for a host this machine cannot reach is
 * still judged (`--offline` stops there).
 */
import { parseTargets } from '../core/hosts.js';
import { type EndpointAdvice, judgeEndpoint } from '../core/providers.js';
import type { Dsn } from './args.js';
import type { Check, Verdict } from './doctor-check.js';

const VERDICT: Record<EndpointAdvice['verdict'], Verdict> = {
  refused: 'fail',
  works: 'ok',
  caveat: 'warn',
  unknown: 'warn',
};

/**
 * One `endpoint` check per host whose name or address a pattern knows; with `all`, a host no
 * pattern knows gets one too (the string alone says nothing). Nothing if the string cannot be
 * read (the connect check says why).
 */
export function endpointChecks(dsn: Dsn, all: boolean, env: NodeJS.ProcessEnv = process.env): Check[] {
  let hosts: { host: string; port: number }[];
  let user: string | undefined;
  try {
    const parsed = parseTargets({ ...(dsn.url === undefined ? {} : { connectionString: dsn.url }), env });
    hosts = parsed.hosts;
    user = typeof parsed.config.user === 'string' ? parsed.config.user : env.PGUSER;
  } catch {
    return [];
  }
  const checks: Check[] = [];
  for (const { host, port } of hosts) {
    const a = judgeEndpoint(host, port, user);
    if (a === null || (a.verdict === 'unknown' && !all)) {
      if (all) {
        checks.push({
          id: 'endpoint',
          verdict: 'ok',
          reason: `${host}:${port}: no managed provider's endpoint pattern matches; the string alone says nothing more (the connection checks do)`,
        });
      }
      continue;
    }
    checks.push({
      id: 'endpoint',
      verdict: VERDICT[a.verdict],
      reason: `${host}:${port}: ${a.provider}, ${a.endpoint}, mode: ${a.mode}; ${a.reason}`,
      fix: `use ${a.use}`,
    });
  }
  return checks;
}

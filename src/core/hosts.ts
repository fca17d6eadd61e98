/**
 * libpq-style multi-host targets for node-postgres, which takes one host per client. Reads the
 * host/port lists of `postgres://u:p@h1:5432,h2:5433/db`, `?host=h1,h2&port=…`, keyword/value
 * strings, `clientConfig.host`/`port` and `PGHOST`/`PGPORT`; the rest of a connection string goes
 * to pg-connection-string with one placeholder host, so it comes out as pg reads a single-host
 * string. Pure: no network, no DNS (pg resolves each host when it connects). Decisions:
 * - Host and port fall back separately: connection string (`?host=`/`?port=` over the URL's list,
 *   as pg-connection-string does), `clientConfig`, `PGHOST`/`PGPORT`, pg's defaults.
 * - Ports: one (for every host) or one per host. A host without one (`h1:5433,h2`, an empty item)
 *   takes the next source's single port (`PGPORT`), else 5432 (libpq: 5432).
 * - An empty item in a host list of two or more is rejected (libpq's default there is a Unix
 *   socket, pg's `localhost`); a lone empty host means "not given".
 * - `hostaddr` stands in for an absent `host` and is rejected beside one (pg connects by name only).
 * - Without a connection string, PGUSER/PGPASSWORD/PGDATABASE/PGSSLMODE fill blanks as pg does;
 *   with one, pg fills them from `process.env` when it connects, so `config` stays pg-connection-string's.
 * - Strings neither URL nor keyword/value (`/socket/dir db`, `socket:`) go to pg-connection-string as is.
 */
import pg from 'pg';
import { type ConnectionOptions, parse, toClientConfig } from 'pg-connection-string';

/** One host of the list, in order; `host` may be a Unix socket directory. */
export interface HostTarget {
  host: string;
  port: number;
}

/** A client config with the target (host, port, connection string) left out. */
export type TargetConfig = Omit<pg.ClientConfig, 'host' | 'port' | 'connectionString'>;

/** The result of {@link parseTargets}. */
export interface ParsedTargets {
  /** One entry per host, in the order given; at least one. */
  hosts: HostTarget[];
  /**
   * Everything else, as a `pg.ClientConfig` without host/port/connectionString: what
   * pg-connection-string's `toClientConfig(parse(…))` gives for the same string with one host
   * (ssl, sslmode, sslrootcert read into `ssl.ca`, options, application_name, …), laid over
   * `clientConfig` as pg does.
   */
  config: TargetConfig;
  /** `target_session_attrs` if given ('any' | 'read-write' | 'read-only' | 'primary' | 'standby' | 'prefer-standby'), else null. */
  targetSessionAttrs: string | null;
  /** Where `targetSessionAttrs` came from: the option's name or `PGTARGETSESSIONATTRS`. */
  targetSessionAttrsFrom: string;
}

/** Where the targets come from; `clientConfig.host`/`port` may be comma lists. */
export interface TargetsInput {
  connectionString?: string;
  /** Defaults to `process.env`. */
  env?: NodeJS.ProcessEnv;
  clientConfig?: Omit<pg.ClientConfig, 'connectionString' | 'port'> & { port?: number | string };
}

const SESSION_ATTRS = ['any', 'read-write', 'read-only', 'primary', 'standby', 'prefer-standby'];
const URL_FORM = /^postgres(?:ql)?:\/\//i;
const KEYWORD_FORM = /^\s*[A-Za-z_][A-Za-z0-9_]*\s*=/;
const TARGET_KEYS = ['host', 'hostaddr', 'port', 'target_session_attrs'];

/** A list option: its source for messages, its items, and whether its values may be quoted in errors. */
interface List {
  source: string;
  items: string[];
  echo: boolean;
}

/** What a connection string says about the targets, and the rest as config. */
interface FromString {
  hosts: List | null;
  ports: List | null;
  config: TargetConfig;
  attrs?: string | undefined;
  echo: boolean;
}

type Fail = (kind: 'type' | 'range', message: string) => never;

/**
 * Parse the targets of a libpq-style connection (see the module comment for the rules).
 * Throws a `TypeError` for a malformed list or mismatched counts (`connectionString lists 2 hosts
 * but 3 ports`), a `RangeError` for a port outside 1–65535; messages never contain the password.
 * `optionName` names the connection string in messages.
 */
export function parseTargets(input: TargetsInput, optionName = 'connectionString'): ParsedTargets {
  const env = input.env ?? process.env;
  type Given = NonNullable<TargetsInput['clientConfig']> & { connectionString?: unknown };
  const { host: ccHost, port: ccPort, connectionString: _, ...ccRest } = (input.clientConfig ?? {}) as Given;
  const cs = input.connectionString;
  const secrets = cs === undefined ? [] : passwordsIn(cs);
  for (const p of [env.PGPASSWORD, ccRest.password]) if (typeof p === 'string') secrets.push(p);
  const fail: Fail = (kind, message) => {
    const safe = secrets.reduce((m, s) => (s.length >= 3 ? m.split(s).join('***') : m), message);
    throw kind === 'type' ? new TypeError(safe) : new RangeError(safe);
  };

  const fromCs = cs === undefined ? null : fromString(cs, optionName, fail);
  const lists = (key: 'host' | 'port', own: List | null | undefined, given: unknown) => {
    const envName = `PG${key.toUpperCase()}`;
    return [own, list(`clientConfig.${key}`, given, fail), list(envName, env[envName], fail)];
  };
  const hostLists = lists('host', fromCs?.hosts, ccHost);
  const hostList =
    hostLists.find((l) => l) ?? list('the default host', pg.defaults.host ?? 'localhost', fail)!;
  const n = hostList.items.length;
  if (n > 1 && hostList.items.includes('')) {
    const at = hostList.items.indexOf('') + 1;
    fail('type', `${hostList.source} lists an empty host (item ${at} of ${n}); name every host`);
  }
  const portLists = lists('port', fromCs?.ports, ccPort);
  const chosen = portLists.findIndex((l) => l?.items.some((p) => p !== ''));
  const portList = portLists[chosen] ?? null;
  const fallback = (): number => {
    const single = portLists.slice(chosen + 1).find((l) => l?.items.length === 1);
    return single ? toPort(single.items[0] ?? '', single, fail) : (pg.defaults.port ?? 5432);
  };
  const ports = portList?.items ?? [];
  if (portList && ports.length !== 1 && ports.length !== n) {
    const other = portList.source === hostList.source ? '' : `${portList.source} lists `;
    fail('type', `${hostList.source} lists ${n} host${n === 1 ? '' : 's'} but ${other}${ports.length} ports`);
  }
  const hosts = hostList.items.map((host, i) => {
    const p = ports.length === 1 ? ports[0] : ports[i];
    return { host, port: p && portList ? toPort(p, portList, fail) : fallback() };
  });

  const [attrs, source, echo] = fromCs?.attrs
    ? [fromCs.attrs, optionName, fromCs.echo]
    : [env.PGTARGETSESSIONATTRS || undefined, 'PGTARGETSESSIONATTRS', true];
  if (attrs !== undefined && !SESSION_ATTRS.includes(attrs)) {
    const shown = echo ? ` ${JSON.stringify(attrs)}` : '';
    fail(
      'type',
      `${source} has an invalid target_session_attrs${shown}; expected ${SESSION_ATTRS.join(', ')}`,
    );
  }
  const config = fromCs ? { ...ccRest, ...fromCs.config } : withEnv(ccRest, env);
  return { hosts, config, targetSessionAttrs: attrs ?? null, targetSessionAttrsFrom: source };
}

/**
 * The `pg.ClientConfig` for one host of the list: the shared config with that host and port
 * (password kept as given). `ssl` is copied, so pg's changes to it do not reach the other hosts.
 */
export function configFor(parsed: ParsedTargets, target: HostTarget): pg.ClientConfig {
  const { ssl } = parsed.config;
  const copy = typeof ssl === 'object' && ssl !== null ? Object.getOwnPropertyDescriptors(ssl) : null;
  const own = copy ? { ssl: Object.create(Object.getPrototypeOf(ssl), copy) as typeof ssl } : {};
  return { ...parsed.config, ...own, host: target.host, port: target.port };
}

/** The hosts for messages: `h1:5432,[::1]:5433,/var/run/postgresql:5432`. */
export function describeHosts(hosts: HostTarget[]): string {
  return hosts
    .map(({ host, port }) => `${host.includes(':') && !host.startsWith('/') ? `[${host}]` : host}:${port}`)
    .join(',');
}

/**
 * The connection string with passwords replaced by `***`: the URL's user info (`postgres://u:***@…`),
 * `?password=`/`?sslpassword=` parameters and keyword/value `password=…` (quoted or not). Best effort
 * for malformed URLs whose password holds an unencoded `/`, `?` or `#`.
 */
export function redactConnectionString(s: string): string {
  return replacePasswords(s, () => '***');
}

/** The passwords in a connection string: as written, unquoted, and percent-decoded. */
export function passwordsIn(s: string, found: string[] = []): string[] {
  replacePasswords(s, (p) => {
    found.push(p, p.replace(/^'|'$/g, '').replace(/\\(.)/g, '$1'), safeDecode(p) ?? p);
    return p;
  });
  return found.concat(found.map((p) => safeDecode(p.replace(/\+/g, ' ')) ?? p));
}

function replacePasswords(s: string, replace: (password: string) => string): string {
  let out = s;
  const auth = authorityOf(s);
  if (auth) {
    const at = s.slice(auth.start, auth.end).lastIndexOf('@');
    const infoEnd = at >= 0 ? auth.start + at : auth.broken ? s.lastIndexOf('@') : -1;
    const colon = s.indexOf(':', auth.start);
    if (colon >= 0 && colon < infoEnd)
      out = `${s.slice(0, colon + 1)}${replace(s.slice(colon + 1, infoEnd))}${s.slice(infoEnd)}`;
  }
  out = out.replace(/([?&](?:ssl)?password=)([^&#]*)/gi, (_m, k: string, v: string) => k + replace(v));
  return out.replace(
    /(^|\s)((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|(?:[^\s\\]|\\.)*)/gi,
    (_m, lead: string, k: string, v: string) => lead + k + replace(v),
  );
}

/**
 * Where a URL's authority (user info and hosts) lies. `atLater`: it has no `@` but the rest does;
 * `broken`: so, and the path holds that `@` or the "port" is not a number, i.e. the password most
 * likely holds an unencoded `/`, `?` or `#`.
 */
function authorityOf(s: string): { start: number; end: number; atLater: boolean; broken: boolean } | null {
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(s);
  if (!scheme) return null;
  const start = scheme[0].length;
  const found = s.slice(start).search(/[/?#]/);
  const end = found < 0 ? s.length : start + found;
  const authority = s.slice(start, end);
  const rest = s.slice(end);
  const atLater = !authority.includes('@') && rest.includes('@');
  const badPort = authority.split(',').some((item) => !/^(\[[^\]]*\]|[^:]*)(:\d*)?$/.test(item));
  return { start, end, atLater, broken: atLater && (badPort || (rest.split('?')[0] ?? '').includes('@')) };
}

function fromString(given: string, name: string, fail: Fail): FromString {
  // as the URL parser pg uses does: leading and trailing spaces and control characters go
  // biome-ignore lint/suspicious/noControlCharactersInRegex: those are what it strips
  const s = given.replace(/^[\u0000-\u0020]+|[\u0000-\u0020]+$/g, '');
  if (URL_FORM.test(s)) return fromUrl(s, name, fail);
  if (KEYWORD_FORM.test(s)) return fromKeywords(keywordValues(s, name, fail), name, fail);
  // pg reads anything else as a database name on a host called "base"
  if (!/^(?:\/|socket:)/i.test(s)) {
    // no password, however malformed the string: anything between a ':' and an '@' is hidden
    const shown = redactConnectionString(s).replace(/:[^:@/]*@/g, ':***@');
    fail(
      'type',
      `${name} must be a postgres:// or postgresql:// URL, keyword/value pairs (host=… dbname=…) or a Unix socket directory (/…), received ${JSON.stringify(shown)}`,
    );
  }
  const { host, port } = parse(s);
  return { hosts: list(name, host, fail), ports: list(name, port, fail), config: configOf(s), echo: true };
}

function fromUrl(s: string, name: string, fail: Fail): FromString {
  const { start, end, atLater } = authorityOf(s) ?? { start: 0, end: 0, atLater: true };
  const authority = s.slice(start, end);
  const at = authority.lastIndexOf('@');
  const echo = !atLater;
  const query = new URLSearchParams(s.slice(end).split('#')[0]?.split('?').slice(1).join('?') ?? '');
  const config = configOf(`${s.slice(0, start + at + 1)}localhost${s.slice(end)}`);
  const hosts: string[] = [];
  const ports: string[] = [];
  for (const item of authority.slice(at + 1).split(',')) {
    const m = /^(?:\[([^\]]*)\]|([^:[\]]*))(?::(.*))?$/.exec(item);
    if (!m || m[3]?.includes(':')) {
      const shown = echo ? ` ${JSON.stringify(item)}` : '';
      fail(
        'type',
        `${name} has a malformed host${shown}; write IPv6 addresses in brackets ([::1]:5432)${hint(echo)}`,
      );
    }
    const host = safeDecode(m[1] ?? m[2] ?? '');
    if (host === null) fail('type', `${name} has a malformed percent-encoding in a host`);
    hosts.push(host);
    ports.push(m[3] ?? '');
  }
  const net = { hosts: hosts.length === 1 && hosts[0] === '' ? null : hosts, ports };
  const fields = new Map([...query].filter(([k]) => TARGET_KEYS.includes(k)));
  return targets(fields, net, config, name, echo, fail);
}

function fromKeywords(kv: Map<string, string>, name: string, fail: Fail): FromString {
  const params = new URLSearchParams([...kv].filter(([k]) => !TARGET_KEYS.includes(k) && k !== 'dbname'));
  const dbname = kv.get('dbname');
  const config = configOf(`postgres://localhost/?${params}`, dbname ? { database: dbname } : {});
  return targets(kv, { hosts: null, ports: [] }, config, name, true, fail);
}

/** Combine the `host`/`hostaddr`/`port`/`target_session_attrs` fields with the URL's own host list. */
function targets(
  fields: Map<string, string>,
  net: { hosts: string[] | null; ports: string[] },
  config: TargetConfig,
  name: string,
  echo: boolean,
  fail: Fail,
): FromString {
  const [host, hostaddr] = [fields.get('host'), fields.get('hostaddr')];
  if (hostaddr && (host || net.hosts)) {
    fail('type', `${name} gives both host and hostaddr; pg connects by host name only, so give one of them`);
  }
  const hosts = list(name, host || hostaddr || net.hosts?.join(','), fail, echo);
  const ports = list(name, fields.get('port') || net.ports.join(','), fail, echo);
  return { hosts, ports, config, attrs: fields.get('target_session_attrs') || undefined, echo };
}

/** libpq's keyword/value syntax: `key = value`, single quotes, backslash escapes in both forms. */
function keywordValues(s: string, name: string, fail: Fail): Map<string, string> {
  const out = new Map<string, string>();
  const token = /\s*([^\s=]+)\s*=\s*(?:'((?:[^'\\]|\\[\s\S])*)'|(?!')((?:[^\s\\]|\\[\s\S])*))\s*/y;
  while (token.lastIndex < s.length) {
    const at = token.lastIndex;
    const m = token.exec(s);
    if (!m)
      fail(
        'type',
        `${name}: expected keyword=value at offset ${at} (quote values with spaces; close quotes)`,
      );
    out.set(m[1] ?? '', (m[2] ?? m[3] ?? '').replace(/\\([\s\S])/g, '$1'));
  }
  return out;
}

/** A comma list from a string (or a number); null if absent or a lone empty string. */
function list(source: string, value: unknown, fail: Fail, echo = true): List | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' && typeof value !== 'number') {
    fail('type', `${source} must be a string or a number, received ${typeof value}`);
  }
  const items = String(value)
    .split(',')
    .map((x) => x.trim());
  return items.length === 1 && items[0] === '' ? null : { source, items, echo };
}

function toPort(value: string, from: List, fail: Fail): number {
  const n = /^\d{1,5}$/.test(value) ? Number(value) : Number.NaN;
  if (n >= 1 && n <= 65535) return n;
  const shown = from.echo ? ` ${JSON.stringify(value)}` : '';
  return fail('range', `${from.source} has an invalid port${shown}; expected 1-65535${hint(from.echo)}`);
}

/** A hint for messages that leave out values, as the password may have spilled into them. */
const hint = (echo: boolean) =>
  echo ? '' : "; percent-encode '/', '?', '#' and '@' in the user name and password";

/** pg-connection-string's client config for a single-host string, without the target fields. */
function configOf(s: string, extra: Partial<ConnectionOptions> = {}): TargetConfig {
  const options: ConnectionOptions = { ...parse(s), ...extra };
  for (const key of TARGET_KEYS) delete options[key];
  const { host: _h, port: _p, connectionString: _c, ...rest } = toClientConfig({ ...options, host: null });
  return rest;
}

/** Without a connection string, pg fills blanks from PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE. */
function withEnv(cc: TargetConfig, env: NodeJS.ProcessEnv): TargetConfig {
  const out: TargetConfig = { ...cc };
  if (!cc.user && env.PGUSER) out.user = env.PGUSER;
  if (!cc.password && env.PGPASSWORD) out.password = env.PGPASSWORD;
  if (!cc.database && env.PGDATABASE) out.database = env.PGDATABASE;
  if (cc.ssl === undefined) {
    const mode = env.PGSSLMODE ?? '';
    if (mode === 'disable') out.ssl = false;
    else if (['prefer', 'require', 'verify-ca', 'verify-full'].includes(mode)) out.ssl = true;
    else if (mode === 'no-verify') out.ssl = { rejectUnauthorized: false };
  }
  return out;
}

function safeDecode(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}

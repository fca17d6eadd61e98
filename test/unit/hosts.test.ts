import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { parse, toClientConfig } from 'pg-connection-string';
import { afterAll, afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { systemClock } from '../../src/core/clock.js';
import { type Endpoint, endpointsOf } from '../../src/core/endpoints.js';
import {
  configFor,
  describeHosts,
  type HostTarget,
  type ParsedTargets,
  parseTargets,
  redactConnectionString,
  type TargetsInput,
} from '../../src/core/hosts.js';
import { findPrimary } from '../../src/core/primary.js';

const dir = mkdtempSync(join(tmpdir(), 'pgleaderlock-hosts-'));
const caFile = join(dir, 'root.crt');
writeFileSync(caFile, '-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n');
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => vi.unstubAllEnvs());

/** Parse with an empty environment unless one is given. */
const targets = (input: TargetsInput, optionName?: string): ParsedTargets =>
  parseTargets({ env: {}, ...input }, optionName);
const hostsOf = (connectionString: string, env: NodeJS.ProcessEnv = {}): string =>
  describeHosts(targets({ connectionString, env }).hosts);

/** What pg itself makes of a single-host string: pg-connection-string's config without host and port. */
function pgConfig(s: string): Record<string, unknown> {
  const {
    host: _h,
    port: _p,
    target_session_attrs: _t,
    ...rest
  } = toClientConfig(parse(s)) as Record<string, unknown>;
  return rest;
}

describe('parseTargets: URL form', () => {
  it.each([
    ['postgres://u:p@h1:5432,h2:5433/db', 'h1:5432,h2:5433'],
    ['postgresql://u:p@h1:5432,h2:5433/db', 'h1:5432,h2:5433'],
    ['POSTGRES://h1,h2/db', 'h1:5432,h2:5432'],
    ['postgres://h1', 'h1:5432'],
    ['postgres://h1:6000', 'h1:6000'],
    ['postgres://h1:5433,h2/db', 'h1:5433,h2:5432'],
    ['postgres://h1,h2/db?port=6000', 'h1:6000,h2:6000'],
    ['postgres://h1,h2/db?port=6000,6001', 'h1:6000,h2:6001'],
    ['postgres://h1:1,h2:2/db?port=6000', 'h1:6000,h2:6000'],
    ['postgres://[::1]:5432,[fe80::1]/db', '[::1]:5432,[fe80::1]:5432'],
    ['postgres://u:p@[2001:db8::1234]:5433/db', '[2001:db8::1234]:5433'],
    ['postgres:///db?host=h1,h2&port=5432,5433', 'h1:5432,h2:5433'],
    ['postgres://ignored:1/db?host=h1,h2', 'h1:1,h2:1'],
    ['postgres:///db?host=/var/run/postgresql', '/var/run/postgresql:5432'],
    ['postgres:///db?host=/var/run/postgresql,/tmp&port=5432,5433', '/var/run/postgresql:5432,/tmp:5433'],
    ['postgres://%2Fvar%2Frun%2Fpostgresql/db', '/var/run/postgresql:5432'],
    ['postgres://u@:5433/db', 'localhost:5433'],
    ['postgres:///db?hostaddr=10.0.0.1,10.0.0.2', '10.0.0.1:5432,10.0.0.2:5432'],
    ['postgres://u:p@h1,h2/db?application_name=me@there', 'h1:5432,h2:5432'],
  ])('%s → %s', (connectionString, expected) => {
    expect(hostsOf(connectionString)).toBe(expected);
  });

  it('keeps hosts and ports in order, as numbers', () => {
    expect(targets({ connectionString: 'postgres://b:2,a:1,c/db' }).hosts).toEqual<HostTarget[]>([
      { host: 'b', port: 2 },
      { host: 'a', port: 1 },
      { host: 'c', port: 5432 },
    ]);
  });

  it.each([
    ['postgres://u:p@h1,h2/db?target_session_attrs=read-write', 'read-write'],
    ['postgres://h1/db?target_session_attrs=any', 'any'],
    ['postgres://h1/db?target_session_attrs=prefer-standby', 'prefer-standby'],
    ["host=h1,h2 target_session_attrs='primary'", 'primary'],
    ['postgres://h1/db', null],
    ['postgres://h1/db?target_session_attrs=', null],
  ])('target_session_attrs of %s is %s', (connectionString, expected) => {
    const parsed = targets({ connectionString });
    expect(parsed.targetSessionAttrs).toBe(expected);
    expect(parsed.config).not.toHaveProperty('target_session_attrs');
  });
});

describe('parseTargets: everything but the hosts is what pg-connection-string gives', () => {
  const single = [
    'postgres://u:p@h:5432/db?sslmode=verify-full',
    'postgres://u:p@h/db?sslmode=no-verify&application_name=worker',
    'postgres://u:p@h/db?uselibpqcompat=true&sslmode=require',
    `postgres://u:p@h/db?sslmode=verify-full&sslrootcert=${encodeURIComponent(caFile)}`,
    'postgres://u:p@h/db?ssl=true',
    'postgres://u:p@h/db?ssl=0',
    'postgres://u:p@h/db?sslmode=disable',
    'postgres://us%40er:p%40ss%2Fw%3Ard%25@h/d%20b?application_name=my%20app',
    'postgres://u:p@h/db?options=-c%20search_path%3Dx%20-c%20statement_timeout%3D5s',
    'postgres://u:p w@h/db',
    'postgres://u:p+q@h/db?client_encoding=UTF8&connect_timeout=10',
    'postgresql://h',
    'postgres://u:p@[::1]:5433/db?keepalives=1',
  ];

  it.each(single)('%s', (s) => {
    const parsed = targets({ connectionString: s });
    expect(parsed.config).toEqual(pgConfig(s));
    const { host, port } = toClientConfig(parse(s));
    expect(parsed.hosts).toEqual([{ host, port: port ?? 5432 }]);
  });

  it.each(single)('%s, with a second host', (s) => {
    const multi = s.replace(/@?(h|\[::1\])(:\d+)?(?=\/|$)/, (m) => `${m},other:6543`);
    expect(multi).toContain(',other:6543');
    const parsed = targets({ connectionString: multi });
    expect(parsed.config).toEqual(pgConfig(s));
    expect(parsed.hosts).toHaveLength(2);
    expect(parsed.hosts[1]).toEqual({ host: 'other', port: 6543 });
  });

  it('reads sslrootcert into ssl.ca as pg-connection-string does', () => {
    const s = `postgres://u:p@h1,h2/db?sslmode=verify-full&sslrootcert=${encodeURIComponent(caFile)}`;
    expect(targets({ connectionString: s }).config.ssl).toEqual({
      ca: expect.stringContaining('not really'),
    });
  });

  it('lays the string over clientConfig, as pg does', () => {
    const parsed = targets({
      connectionString: 'postgres://u:p@h1,h2/db',
      clientConfig: { host: 'cc', user: 'cc-user', statement_timeout: 5000 },
    });
    expect(parsed.hosts.map((h) => h.host)).toEqual(['h1', 'h2']);
    expect(parsed.config).toEqual({ user: 'u', password: 'p', database: 'db', statement_timeout: 5000 });
  });
});

describe('parseTargets: keyword/value form', () => {
  it.each<[string, string, Record<string, unknown>]>([
    [
      "host=h1,h2 port=5432,5433 dbname=app user=u password='p w'",
      'h1:5432,h2:5433',
      { user: 'u', password: 'p w', database: 'app' },
    ],
    [
      "host = h1  port= 6000 password = 'it\\'s a \\\\ test'",
      'h1:6000',
      { user: '', password: "it's a \\ test" },
    ],
    ['host=h1 password=a\\ b\\\\c', 'h1:5432', { user: '', password: 'a b\\c' }],
    ["host=h1 password='' user=u", 'h1:5432', { user: 'u', password: '' }],
    ["host='/var/run/postgresql' dbname='my db'", '/var/run/postgresql:5432', { database: 'my db' }],
    ['hostaddr=10.0.0.1,10.0.0.2 port=5433', '10.0.0.1:5433,10.0.0.2:5433', {}],
    ['host=h1,h2,h3 port=1,,3', 'h1:1,h2:5432,h3:3', {}],
    ['host=::1', '[::1]:5432', {}],
    ['dbname=app', 'localhost:5432', { database: 'app' }],
    ["host='h1'port=6000 password=it's", 'h1:6000', { password: "it's" }],
    ['  host=h1\tport=6000\n', 'h1:6000', {}],
  ])('%s', (connectionString, hosts, config) => {
    const parsed = targets({ connectionString });
    expect(describeHosts(parsed.hosts)).toBe(hosts);
    expect(parsed.config).toMatchObject(config);
  });

  it('gives the same config as the equivalent URL', () => {
    const kv = "host=h1,h2 dbname=d user=u password='p@ss w' sslmode=verify-full application_name='my app'";
    const url = 'postgres://u:p%40ss%20w@h1/d?sslmode=verify-full&application_name=my%20app';
    expect(targets({ connectionString: kv }).config).toEqual(pgConfig(url));
    const ca = `host=h1 sslmode=verify-full sslrootcert='${caFile}' options='-c search_path=x'`;
    expect(targets({ connectionString: ca }).config).toEqual(
      pgConfig(`postgres://h1?sslmode=verify-full&sslrootcert=${caFile}&options=-c%20search_path%3Dx`),
    );
  });

  it.each([
    ['host=h1 dbname', /expected keyword=value at offset 8/],
    ['host=h1 =x', /expected keyword=value at offset 8/],
    [
      "host=h1 password='abc",
      /expected keyword=value at offset 8 \(quote values with spaces; close quotes\)/,
    ],
    ['host=h1 hostaddr=10.0.0.1', /both host and hostaddr/],
  ])('rejects %s', (connectionString, message) => {
    expect(() => targets({ connectionString })).toThrow(TypeError);
    expect(() => targets({ connectionString })).toThrow(message);
  });
});

describe('parseTargets: environment and clientConfig', () => {
  it('falls back to PGHOST and PGPORT, with PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE', () => {
    const env = {
      PGHOST: 'h1,h2',
      PGPORT: '5432,5433',
      PGUSER: 'u',
      PGPASSWORD: 'pw',
      PGDATABASE: 'db',
      PGSSLMODE: 'require',
    };
    expect(targets({ env })).toEqual<ParsedTargets>({
      hosts: [
        { host: 'h1', port: 5432 },
        { host: 'h2', port: 5433 },
      ],
      config: { user: 'u', password: 'pw', database: 'db', ssl: true },
      targetSessionAttrs: null,
      targetSessionAttrsFrom: 'PGTARGETSESSIONATTRS',
    });
  });

  it.each<[string | undefined, unknown]>([
    ['disable', false],
    ['verify-full', true],
    ['no-verify', { rejectUnauthorized: false }],
    ['bogus', undefined],
    [undefined, undefined],
  ])('PGSSLMODE=%s gives ssl %j', (PGSSLMODE, ssl) => {
    expect(targets({ env: { PGSSLMODE } }).config.ssl).toEqual(ssl);
  });

  it.each<[string, TargetsInput, string]>([
    ['nothing: pg defaults', {}, 'localhost:5432'],
    [
      'a string without hosts',
      { connectionString: 'postgres://u@/db', env: { PGHOST: 'h1,h2' } },
      'h1:5432,h2:5432',
    ],
    [
      'PGPORT for a URL without ports',
      { connectionString: 'postgres://h1,h2/db', env: { PGPORT: '6000' } },
      'h1:6000,h2:6000',
    ],
    [
      'PGPORT for a host without one',
      { connectionString: 'postgres://h1:5433,h2/db', env: { PGPORT: '6000' } },
      'h1:5433,h2:6000',
    ],
    [
      'PGPORT list for ?host=',
      { connectionString: 'postgres:///db?host=a,b', env: { PGPORT: '1,2' } },
      'a:1,b:2',
    ],
    ['clientConfig lists', { clientConfig: { host: 'h1, h2', port: '5432,5433' } }, 'h1:5432,h2:5433'],
    ['clientConfig numeric port', { clientConfig: { host: 'h1,h2', port: 6000 } }, 'h1:6000,h2:6000'],
    ['clientConfig over env', { clientConfig: { host: 'cc' }, env: { PGHOST: 'env', PGPORT: '7' } }, 'cc:7'],
    [
      'string over clientConfig',
      { connectionString: 'postgres://s/db', clientConfig: { host: 'cc', port: 1 } },
      's:1',
    ],
    ['unused bad PGPORT', { connectionString: 'postgres://h1:1,h2:2/db', env: { PGPORT: 'x' } }, 'h1:1,h2:2'],
  ])('%s', (_name, input, expected) => {
    expect(describeHosts(targets(input).hosts)).toBe(expected);
  });

  it('clientConfig beats PGUSER/PGPASSWORD/PGDATABASE/PGSSLMODE without a connection string', () => {
    const env = { PGUSER: 'eu', PGPASSWORD: 'ep', PGDATABASE: 'ed', PGSSLMODE: 'require' };
    const clientConfig = { user: 'cu', password: 'cp', database: 'cd', ssl: false };
    expect(targets({ env, clientConfig }).config).toEqual(clientConfig);
  });

  it('reads PGTARGETSESSIONATTRS when the string has none', () => {
    const env = { PGTARGETSESSIONATTRS: 'standby' };
    expect(targets({ connectionString: 'postgres://h/db', env }).targetSessionAttrs).toBe('standby');
    const given = 'postgres://h/db?target_session_attrs=read-only';
    expect(targets({ connectionString: given, env }).targetSessionAttrs).toBe('read-only');
    expect(targets({ env: { PGTARGETSESSIONATTRS: '' } }).targetSessionAttrs).toBeNull();
  });

  it('env defaults to process.env', () => {
    vi.stubEnv('PGHOST', 'eh1,eh2');
    vi.stubEnv('PGPORT', '7001,7002');
    expect(describeHosts(parseTargets({}).hosts)).toBe('eh1:7001,eh2:7002');
  });
});

describe('parseTargets: errors', () => {
  it.each<[string, TargetsInput, string | undefined, string]>([
    [
      'URL ports',
      { connectionString: 'postgres:///db?host=h1,h2&port=1,2,3' },
      undefined,
      'connectionString lists 2 hosts but 3 ports',
    ],
    [
      'key/value',
      { connectionString: 'host=a,b,c port=1,2' },
      undefined,
      'connectionString lists 3 hosts but 2 ports',
    ],
    ['option name', { connectionString: 'host=a,b port=1,2,3' }, '--db', '--db lists 2 hosts but 3 ports'],
    [
      '?host= over URL ports',
      { connectionString: 'postgres://h1:1,h2:2/db?host=a,b,c' },
      undefined,
      'connectionString lists 3 hosts but 2 ports',
    ],
    [
      'env',
      { env: { PGHOST: 'h1,h2', PGPORT: '1,2,3' } },
      undefined,
      'PGHOST lists 2 hosts but PGPORT lists 3 ports',
    ],
    [
      'string and env',
      { connectionString: 'postgres://a,b,c/db', env: { PGPORT: '1,2' } },
      undefined,
      'connectionString lists 3 hosts but PGPORT lists 2 ports',
    ],
    [
      'clientConfig',
      { clientConfig: { host: 'a,b', port: '1,2,3' } },
      undefined,
      'clientConfig.host lists 2 hosts but clientConfig.port lists 3 ports',
    ],
    [
      'default host',
      { env: { PGPORT: '1,2' } },
      undefined,
      'the default host lists 1 host but PGPORT lists 2 ports',
    ],
  ])('mismatched counts (%s)', (_name, input, optionName, message) => {
    expect(() => targets(input, optionName)).toThrow(new TypeError(message));
  });

  it.each<[TargetsInput, RegExp]>([
    [{ connectionString: 'postgres://h1,,h2/db' }, /connectionString lists an empty host \(item 2 of 3\)/],
    [{ connectionString: 'host=h1,' }, /connectionString lists an empty host \(item 2 of 2\)/],
    [{ env: { PGHOST: ',h2' } }, /PGHOST lists an empty host \(item 1 of 2\)/],
    [
      { connectionString: 'postgres://::1/db' },
      /connectionString has a malformed host "::1"; write IPv6 addresses in brackets/,
    ],
    [{ connectionString: 'postgres://fe80::1:5432,h2/db' }, /malformed host "fe80::1:5432"/],
    [{ connectionString: 'postgres://[::1/db' }, /malformed host "\[::1"/],
    [{ connectionString: 'postgres://[::1]x/db' }, /malformed host/],
    [{ connectionString: 'postgres://h%zz/db' }, /malformed percent-encoding in a host/],
    [{ connectionString: 'postgres://h1,h2/db?hostaddr=10.0.0.1' }, /both host and hostaddr/],
    [
      { connectionString: 'postgres://h/db?target_session_attrs=master' },
      /connectionString has an invalid target_session_attrs "master"; expected any, read-write/,
    ],
    [{ env: { PGTARGETSESSIONATTRS: 'x' } }, /PGTARGETSESSIONATTRS has an invalid target_session_attrs "x"/],
    [
      { clientConfig: { host: true } } as unknown as TargetsInput,
      /clientConfig.host must be a string or a number, received boolean/,
    ],
  ])('rejects %j', (input, message) => {
    expect(() => targets(input)).toThrow(TypeError);
    expect(() => targets(input)).toThrow(message);
  });

  it.each<[TargetsInput, string]>([
    [{ connectionString: 'postgres://h1:0,h2/db' }, 'connectionString has an invalid port "0"'],
    [{ connectionString: 'postgres://h1:65536/db' }, 'connectionString has an invalid port "65536"'],
    [{ connectionString: 'postgres://h1:abc/db' }, 'connectionString has an invalid port "abc"'],
    [{ connectionString: 'postgres://h1,h2/db?port=5432,-1' }, 'connectionString has an invalid port "-1"'],
    [{ connectionString: 'host=h1 port=54.32' }, 'connectionString has an invalid port "54.32"'],
    [{ connectionString: 'host=h1 port=005432' }, 'connectionString has an invalid port "005432"'],
    [{ env: { PGPORT: 'x' } }, 'PGPORT has an invalid port "x"'],
    [{ env: { PGHOST: 'a,b', PGPORT: '1,99999' } }, 'PGPORT has an invalid port "99999"'],
    [{ clientConfig: { port: 70000 } }, 'clientConfig.port has an invalid port "70000"'],
    [{ clientConfig: { port: Number.NaN } }, 'clientConfig.port has an invalid port "NaN"'],
    [{ connectionString: 'postgres://h1:1,h2/db', env: { PGPORT: '0' } }, 'PGPORT has an invalid port "0"'],
  ])('bad port: %j', (input, message) => {
    expect(() => targets(input)).toThrow(new RangeError(`${message}; expected 1-65535`));
  });
});

describe('no error message contains the password', () => {
  const pw = 'S3cr3t-Pw';
  it.each<[string, TargetsInput]>([
    ['URL counts', { connectionString: `postgres://u:${pw}@h1,h2/db?port=1,2,3` }],
    ['URL bad port', { connectionString: `postgres://u:${pw}@h1:99999/db` }],
    ['encoded password', { connectionString: `postgres://u:${encodeURIComponent(`${pw}/?#@`)}@h1:0/db` }],
    ['unencoded / in the password', { connectionString: 'postgres://u:S3cr/3t-Pw@h1/db' }],
    ['unencoded ? in the password', { connectionString: 'postgres://u:S3cr?3t-Pw@h1/db' }],
    ['unencoded # in the password', { connectionString: 'postgres://u:S3cr#3t-Pw@h1/db' }],
    ['unencoded / and a colon', { connectionString: 'postgres://u:S3:cr/3t-Pw@h1/db' }],
    ['password as port', { connectionString: 'postgres://u:70000@h1:70000/db' }],
    ['query password', { connectionString: `postgres://h1/db?password=${pw}&target_session_attrs=x` }],
    ['key/value space', { connectionString: `host=h1 password=S3cr3t Pw port=1` }],
    ['key/value quote', { connectionString: `host=h1 password='${pw}` }],
    ['key/value bad port', { connectionString: `host=h1,h2 password='${pw}' port=1,2,3` }],
    ['tsa in password', { connectionString: 'postgres://u:p?target_session_attrs=S3cr3t-Pw@h1' }],
    ['PGPASSWORD', { env: { PGPASSWORD: pw, PGPORT: pw } }],
    ['clientConfig.password', { clientConfig: { password: pw, port: pw } }],
  ])('%s', (_name, input) => {
    let caught: unknown;
    try {
      targets(input);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(Error);
    const err = caught as Error;
    for (const text of [err.message, String(err.stack)]) {
      expect(text).not.toContain(pw);
      expect(text).not.toContain('S3cr3t');
      expect(text).not.toContain('70000');
    }
  });
});

describe('configFor and describeHosts', () => {
  it('gives one pg.ClientConfig per host, password kept', () => {
    const parsed = targets({
      connectionString: 'postgres://u:p%20w@h1:5432,[::1]:5433/db?application_name=x',
    });
    expect(parsed.hosts.map((h) => configFor(parsed, h))).toEqual([
      { user: 'u', password: 'p w', database: 'db', application_name: 'x', host: 'h1', port: 5432 },
      { user: 'u', password: 'p w', database: 'db', application_name: 'x', host: '::1', port: 5433 },
    ]);
  });

  it('copies ssl, keeping a key pg has hidden, so no host sees another host’s changes', () => {
    const ssl = { rejectUnauthorized: true, key: 'KEY' };
    const parsed = targets({ clientConfig: { host: 'h1,h2', ssl } });
    const first = configFor(parsed, { host: 'h1', port: 1 });
    if (typeof first.ssl !== 'object') throw new Error('ssl should be an object');
    expect(first.ssl).not.toBe(ssl);
    Object.defineProperty(first.ssl, 'key', { enumerable: false }); // as pg's ConnectionParameters does
    const second = configFor(parsed, { host: 'h2', port: 1 });
    expect(second.ssl).toEqual(ssl);
    expect(configFor(targets({ env: { PGSSLMODE: 'require' } }), { host: 'h', port: 1 }).ssl).toBe(true);
  });

  it.each<[HostTarget[], string]>([
    [[{ host: 'h1', port: 5432 }], 'h1:5432'],
    [
      [
        { host: 'h1', port: 5432 },
        { host: 'h2', port: 5433 },
      ],
      'h1:5432,h2:5433',
    ],
    [[{ host: '::1', port: 5432 }], '[::1]:5432'],
    [[{ host: '/var/run/postgresql', port: 5432 }], '/var/run/postgresql:5432'],
  ])('describeHosts(%j) is %s', (hosts, expected) => {
    expect(describeHosts(hosts)).toBe(expected);
  });
});

describe('redactConnectionString', () => {
  it.each([
    ['postgres://u:secret@h1:5432,h2:5433/db', 'postgres://u:***@h1:5432,h2:5433/db'],
    ['postgresql://u:p%40ss@h/db?sslmode=require', 'postgresql://u:***@h/db?sslmode=require'],
    ['postgres://u:p@ss@h/db', 'postgres://u:***@h/db'],
    ['postgres://u@h/db', 'postgres://u@h/db'],
    ['postgres://h:5432/db?application_name=me@there', 'postgres://h:5432/db?application_name=me@there'],
    ['postgres://u:pa/ss@h/db', 'postgres://u:***@h/db'],
    ['postgres://u:pa?ss@h/db', 'postgres://u:***@h/db'],
    ['postgres://h/db?password=secret&sslpassword=k', 'postgres://h/db?password=***&sslpassword=***'],
    ['postgres://h/db?user=u&password=secret#x', 'postgres://h/db?user=u&password=***#x'],
    ["host=h password='a b\\' c' user=u", 'host=h password=*** user=u'],
    ['password=abc host=h', 'password=*** host=h'],
    ['host=h password = abc\\ def dbname=d', 'host=h password = *** dbname=d'],
    ['host=h sslpassword=k', 'host=h sslpassword=***'],
    ['host=h dbname=password', 'host=h dbname=password'],
  ])('%s → %s', (input, expected) => {
    expect(redactConnectionString(input)).toBe(expected);
  });
});

describe('DNS: a host name is resolved again on every connection attempt', () => {
  /** A TCP listener on `address` that records each connection and closes it (no PostgreSQL). */
  async function listener(address: string, port: number): Promise<{ port: number; hits: () => number }> {
    let hits = 0;
    const server = net.createServer((socket) => {
      hits += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, address, resolve);
    });
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const bound = server.address();
    return { port: typeof bound === 'object' && bound ? bound.port : 0, hits: () => hits };
  }

  it('the lock’s endpoint resolves its name at each connect, so a name that moves is followed', async () => {
    // one name, two addresses on the same port: where the name points now, and where it moves
    const before = await listener('127.0.0.1', 0);
    const after = await listener('127.0.0.2', before.port);
    let points = '127.0.0.1';
    const asked: string[] = [];
    /** The resolver of the sockets the endpoint's clients open (a fake DNS). */
    const lookup = (
      hostname: string,
      options: { all?: boolean },
      callback: (...args: unknown[]) => void,
    ): void => {
      asked.push(hostname);
      if (options.all) callback(null, [{ address: points, family: 4 }]);
      else callback(null, points, 4);
    };
    const stream = (): net.Socket => {
      const socket = new net.Socket();
      const connect = socket.connect.bind(socket);
      // pg calls connect(port, host); pass the fake resolver along
      socket.connect = ((port: number, host: string) =>
        connect({ port, host, lookup: lookup as net.LookupFunction })) as typeof socket.connect;
      return socket;
    };
    const [endpoint] = endpointsOf(
      { clientConfig: { host: 'db.moving.test', port: before.port, stream } },
      'pgleaderlock:dns-test',
      1000,
    );
    await expect((endpoint as Endpoint).connect()).rejects.toThrow(); // no PostgreSQL there
    expect([before.hits(), after.hits()]).toEqual([1, 0]);
    points = '127.0.0.2'; // the name moves (a failover of an RDS endpoint, a Kubernetes service)
    await expect((endpoint as Endpoint).connect()).rejects.toThrow();
    expect([before.hits(), after.hits()]).toEqual([1, 1]);
    expect(asked).toEqual(['db.moving.test', 'db.moving.test']); // asked again, not cached
  });
});

describe('findPrimary: which primary wins', () => {
  /** A stand-in for a connected `pg.Client` that answers the survey with `row`. */
  class SurveyClient extends EventEmitter {
    ended = false;
    constructor(private readonly row: { recovery: boolean; system_id: string; timeline: number | null }) {
      super();
    }
    async query(): Promise<{ rows: unknown[] }> {
      return { rows: [this.row] };
    }
    async end(): Promise<void> {
      this.ended = true;
    }
  }

  /** A host that connects after `delayMs` and reports itself a primary on `timeline`. */
  function host(label: string, timeline: number, delayMs: number) {
    const client = new SurveyClient({ recovery: false, system_id: '7', timeline });
    const endpoint: Endpoint = {
      label,
      connect: async () => {
        await new Promise((r) => setTimeout(r, delayMs));
        return client as unknown as pg.Client;
      },
    };
    return { client, endpoint };
  }

  it('among primaries on equal timelines, the first listed wins, even when it answers last', async () => {
    const first = host('h1:5432', 3, 40);
    const second = host('h2:5432', 3, 0);
    const found = await findPrimary([first.endpoint, second.endpoint], {
      clock: systemClock,
      queryTimeoutMs: 1000,
    });
    expect(found.endpoint.label).toBe('h1:5432');
    expect(found.client).toBe(first.client);
    expect(found.others.map((o) => [o.endpoint.label, o.state.kind])).toEqual([['h2:5432', 'primary']]);
    expect(second.client.ended).toBe(true); // the loser's connection is closed
    // and in the other order, the other one
    const again = await findPrimary([host('h2:5432', 3, 40).endpoint, host('h1:5432', 3, 0).endpoint], {
      clock: systemClock,
      queryTimeoutMs: 1000,
    });
    expect(again.endpoint.label).toBe('h2:5432');
  });

  it('a newer timeline wins over the order (the promoted one)', async () => {
    const old = host('h1:5432', 1, 0);
    const promoted = host('h2:5432', 2, 40);
    const found = await findPrimary([old.endpoint, promoted.endpoint], {
      clock: systemClock,
      queryTimeoutMs: 1000,
    });
    expect(found.endpoint.label).toBe('h2:5432');
    expect(found.timeline).toBe(2);
    expect(old.client.ended).toBe(true);
  });
});

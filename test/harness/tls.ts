/**
 * A PostgreSQL server that accepts TLS only: a CA and a server certificate for `localhost`
 * and 127.0.0.1 made at test time with the openssl CLI, `ssl = on`, and a pg_hba.conf
 * (passed as `hba_file`, written before the server starts) whose only TCP rules are `hostssl`.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ownServer } from './db.js';
import { type PgServer, TEST_PASSWORD, TEST_USER } from './pg-server.js';

export const OPENSSL_MISSING =
  'openssl is required for the TLS compat tests: install openssl (apt-get install openssl)';

export interface Certificates {
  /** The CA certificate clients verify against (PEM file). */
  ca: string;
  /** The server's certificate and key (PEM files); CN and SAN `localhost`, SAN IP 127.0.0.1. */
  cert: string;
  key: string;
}

function openssl(args: string[], cwd: string): void {
  const r = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  if (r.error && (r.error as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(OPENSSL_MISSING);
  if (r.status !== 0) throw new Error(`openssl ${args[0]} failed: ${r.stderr || r.error}`);
}

/** A fresh CA and a server certificate signed by it, in `dir` (valid for 2 days). */
export function makeCertificates(dir: string): Certificates {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    [
      'req',
      '-x509',
      ...ec,
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
      '-days',
      '2',
      '-subj',
      '/CN=pgleaderlock test CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  openssl(['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost'], dir);
  fs.writeFileSync(
    path.join(dir, 'server.ext'),
    [
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
      'basicConstraints=CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
      '',
    ].join('\n'),
  );
  openssl(
    [
      'x509',
      '-req',
      '-in',
      'server.csr',
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      'server.crt',
      '-days',
      '2',
      '-extfile',
      'server.ext',
    ],
    dir,
  );
  return {
    ca: path.join(dir, 'ca.crt'),
    cert: path.join(dir, 'server.crt'),
    key: path.join(dir, 'server.key'),
  };
}

/** Only TLS over TCP (and the server user over a Unix socket, which the test servers do not open). */
const HBA = `local all all trust
hostssl all all 127.0.0.1/32 scram-sha-256
hostssl all all ::1/128 scram-sha-256
`;

export interface TlsServer {
  readonly server: PgServer;
  readonly certificates: Certificates;
  /** `postgres://…@localhost:PORT/postgres?sslmode=verify-full&sslrootcert=<ca>`. */
  readonly url: string;
  /** The same server without TLS (`sslmode=disable`): pg_hba.conf must refuse it. */
  readonly plainUrl: string;
  dispose(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

/** A server of the test's own that accepts only `hostssl` connections. Dispose it. */
export async function ownTlsServer(): Promise<TlsServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-tls-'));
  fs.chmodSync(dir, 0o755);
  const certificates = makeCertificates(dir);
  const hba = path.join(dir, 'pg_hba.conf');
  fs.writeFileSync(hba, HBA);
  // PostgreSQL insists that the key be private to the user it runs as
  fs.chmodSync(certificates.key, 0o600);
  fs.chmodSync(certificates.ca, 0o644);
  fs.chmodSync(certificates.cert, 0o644);
  if (isRoot) execFileSync('chown', ['-R', 'postgres:postgres', dir]);
  let server: PgServer;
  try {
    server = await ownServer({
      settings: {
        ssl: 'on',
        ssl_cert_file: certificates.cert,
        ssl_key_file: certificates.key,
        hba_file: hba,
      },
    });
  } catch (err) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const base = `postgres://${TEST_USER}:${TEST_PASSWORD}@localhost:${server.port}/postgres`;
  const tls: TlsServer = {
    server,
    certificates,
    url: `${base}?sslmode=verify-full&sslrootcert=${encodeURIComponent(certificates.ca)}`,
    plainUrl: `${base}?sslmode=disable`,
    async dispose() {
      await server.dispose();
      fs.rmSync(dir, { recursive: true, force: true });
    },
    [Symbol.asyncDispose]() {
      return tls.dispose();
    },
  };
  return tls;
}

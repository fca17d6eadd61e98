/**
 * Loopback ports for the embedded servers (the CLI's demo, the tests' servers), held from a
 * server's first start to its disposal, running or stopped: a restart gets its port back.
 *
 * The kernel hands a closed port to the next `bind(0)` of any process. A server stopped for a
 * second (a restart test) could find its port given to another process's new server and come
 * up on another one, its clients still dialling the old port: a failover test once waited 20 s
 * for a restarted primary that was listening elsewhere (CI run AD, 2026-12-03). A reservation
 * is a file named by the port in a folder every process on the machine shares, holding its
 * owner's pid; {@link freePort} passes over reserved ports, and a dead owner's are taken over.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/**
 * One folder per user, private to that user (0700, checked to be a real folder the user owns:
 * no other user can plant a file or a link in it). On POSIX under `/tmp`, not `os.tmpdir()`:
 * a child with a TMPDIR of its own (the compat suite's fresh install) must still see the
 * others' ports. A folder that fails the check is not used: ports are then not reserved.
 */
const DIR =
  process.platform === 'win32'
    ? path.join(os.tmpdir(), 'pgleaderlock-ports')
    : `/tmp/pgleaderlock-ports-${process.getuid?.() ?? 'user'}`;

/** The folder, made or checked once; false if it is not ours alone. */
let dirChecked: boolean | null = null;
function usable(): boolean {
  if (dirChecked !== null) return dirChecked;
  try {
    fs.mkdirSync(DIR, { recursive: true, mode: 0o700 });
    const st = fs.lstatSync(DIR);
    const uid = process.getuid?.();
    dirChecked = st.isDirectory() && (uid === undefined || (st.uid === uid && (st.mode & 0o077) === 0));
  } catch {
    dirChecked = false;
  }
  return dirChecked;
}

function file(port: number): string {
  return path.join(DIR, String(port));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, owned by another user
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** A live process holds `port` (its owner's file names a running pid). */
export function isReserved(port: number): boolean {
  if (!usable()) return false;
  let text: string;
  try {
    text = fs.readFileSync(file(port), 'utf8');
  } catch {
    return false;
  }
  const pid = Number.parseInt(text, 10);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  return pid === process.pid || alive(pid);
}

function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** A loopback port free now and held by no embedded server, running or stopped. */
export async function freePort(): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const port = await kernelPort();
    if (!isReserved(port)) return port;
  }
  throw new Error(`no free loopback port that ${DIR} does not list, in 100 tries`);
}

/** A free port, reserved for this process until {@link releasePort}. */
export async function reservePort(): Promise<number> {
  if (!usable()) return freePort();
  for (let i = 0; i < 100; i++) {
    const port = await freePort();
    try {
      fs.writeFileSync(file(port), String(process.pid), { flag: 'wx' });
      return port;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') continue;
      // a dead owner's file: moved aside (one process wins the rename), then taken anew by
      // a later try; a live one's: another port
      if (isReserved(port)) continue;
      try {
        const aside = `${file(port)}.stale-${process.pid}`;
        fs.renameSync(file(port), aside);
        fs.rmSync(aside, { force: true });
      } catch {
        // another process moved it first
      }
    }
  }
  throw new Error(`could not reserve a loopback port in ${DIR} in 100 tries`);
}

/** Give `port` back (a server disposed of). Only this process's own reservation is removed. */
export function releasePort(port: number): void {
  try {
    if (fs.readFileSync(file(port), 'utf8').trim() === String(process.pid)) fs.rmSync(file(port));
  } catch {
    // not reserved, or already released
  }
}

/**
 * `server.listen(0)` on loopback, again until the kernel's port is one no embedded server holds
 * (a stopped one's, about to restart). Resolves to the port.
 */
export async function listenFree(server: net.Server): Promise<number> {
  for (let i = 0; i < 100; i++) {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    const addr = server.address();
    const port = typeof addr === 'object' && addr ? addr.port : 0;
    if (!isReserved(port)) return port;
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
  throw new Error(`no free loopback port that ${DIR} does not list, in 100 tries`);
}

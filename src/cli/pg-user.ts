/**
 * The OS user that runs a throwaway server (embedded-pg.ts): PostgreSQL refuses to run as
 * root, so as root the server runs as `postgres` (created if missing, when the server's
 * files are ours to create) or `nobody` (an existing data directory), and the files it
 * needs are handed to that user.
 */
import { execFileSync } from 'node:child_process';

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

export interface PgIds {
  uid: number;
  gid: number;
}

const cachedIds = new Map<string, PgIds>();

function idsOf(user: string): PgIds {
  return {
    uid: Number(execFileSync('id', ['-u', user]).toString().trim()),
    gid: Number(execFileSync('id', ['-g', user]).toString().trim()),
  };
}

/** uid/gid of the OS user that runs the server when we are root; undefined otherwise. */
export function serverIds(mode: 'create' | 'existing'): PgIds | undefined {
  if (!isRoot) return undefined;
  const hit = cachedIds.get(mode);
  if (hit) return hit;
  let ids: PgIds;
  try {
    ids = idsOf('postgres');
  } catch {
    if (mode === 'existing') ids = idsOf('nobody');
    else {
      execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', 'postgres']);
      ids = idsOf('postgres');
    }
  }
  cachedIds.set(mode, ids);
  return ids;
}

export function chownTree(dir: string, ids: PgIds | undefined): void {
  if (!ids) return;
  execFileSync('chown', ['-R', `${ids.uid}:${ids.gid}`, dir]);
}

export function runAs(ids: PgIds | undefined): { uid?: number; gid?: number } {
  return ids ? { uid: ids.uid, gid: ids.gid } : {};
}

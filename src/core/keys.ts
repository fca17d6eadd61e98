/**
 * Lock keys from a name. Stable across versions and platforms: the first 8 bytes of
 * SHA-256 over the UTF-8 bytes of `"pgleaderlock:" + name`, read as two big-endian signed
 * 32-bit integers. The prefix keeps these keys apart from other schemes that hash the same
 * names. Changing this function is a breaking change: tests pin its vectors.
 */
import { createHash } from 'node:crypto';

export function keysFromName(name: string): [key1: number, key2: number] {
  if (typeof name !== 'string' || name.length === 0) {
    throw new TypeError(`name must be a non-empty string, received ${JSON.stringify(name)}`);
  }
  const digest = createHash('sha256').update(`pgleaderlock:${name}`, 'utf8').digest();
  return [digest.readInt32BE(0), digest.readInt32BE(4)];
}

/** The NOTIFY channel of a key pair: an identifier-safe name from the unsigned keys. */
export function channelFor(key1: number, key2: number): string {
  return `pgleaderlock_${(key1 >>> 0).toString(16)}_${(key2 >>> 0).toString(16)}`;
}

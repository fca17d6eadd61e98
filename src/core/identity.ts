/**
 * A candidate's id, and how other sessions find it on the server.
 *
 * Other sessions see a session only through `pg_stat_activity`: its `application_name`,
 * which PostgreSQL cuts to 63 bytes and in which it shows every byte outside printable
 * ASCII escaped (`\xNN`), and the text of its last statement. So the id travels two ways:
 *  - `application_name` carries a *name* that always survives intact: `pgleaderlock:<id>`
 *    when the id is printable ASCII and fits, else `pgleaderlock:<readable part>~<hash>`
 *    (the hash of the whole id). Candidates are matched by this name, exactly.
 *  - each statement of a lock session carries the id itself in its tag (`tagged`) when
 *    the name cannot: `/* p=3, id="\u043a..." *\/`, JSON with every non-ASCII character
 *    and `/` escaped, so it reads back intact whatever the database's encoding and can
 *    never end or nest the comment.
 */
import { createHash } from 'node:crypto';
import { show } from './validate.js';

/** The most UTF-16 code units an id may have: its tag then fits `track_activity_query_size`'s default 1 kB. */
export const MAX_ID_LENGTH = 128;

/** PostgreSQL keeps application_name to NAMEDATALEN - 1 bytes. */
const NAME_BYTES = 63;
/** The hash's length in base-32 characters (65 bits): a collision between two ids of one lock is not a concern. */
const HASH_CHARS = 13;
const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
/** The end of a hashed name. */
const HASHED = new RegExp(`~[${BASE32}]{${HASH_CHARS}}$`);

/** Printable ASCII only: what PostgreSQL keeps unchanged in application_name. */
function isPrintableAscii(s: string): boolean {
  return /^[\x20-\x7e]*$/.test(s);
}

/**
 * What an id may not hold: control characters (C0, DEL, C1), format characters (bidi
 * overrides, zero-width ones, a BOM), private-use and unassigned code points, line and
 * paragraph separators, and unpaired surrogates. They garble logs or hide what an id says;
 * PostgreSQL refuses a NUL.
 */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}]/u;

/**
 * Check an id: 1 to MAX_ID_LENGTH UTF-16 code units (a character outside the BMP, such as
 * an emoji, counts 2) of printable Unicode. `option` names it in the error.
 */
export function checkId(option: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_ID_LENGTH) {
    throw new TypeError(
      `${option} must be a string of 1 to ${MAX_ID_LENGTH} characters, received ${show(value)}`,
    );
  }
  if (UNPRINTABLE.test(value)) {
    throw new TypeError(
      `${option} must be printable: no control, format, private-use or unassigned characters and no unpaired surrogate, received ${show(value)}`,
    );
  }
  return value;
}

function hashOf(id: string): string {
  const digest = createHash('sha256').update(id, 'utf8').digest();
  let out = '';
  let bits = 0;
  let acc = 0;
  for (const byte of digest) {
    acc = (acc << 8) | byte;
    bits += 8;
    while (bits >= 5 && out.length < HASH_CHARS) {
      bits -= 5;
      out += BASE32[(acc >>> bits) & 31];
    }
    if (out.length === HASH_CHARS) break;
    acc &= (1 << bits) - 1;
  }
  return out;
}

/**
 * The name `id` has in `application_name` under `prefix`: `<prefix><id>` when the id is
 * printable ASCII and the whole fits 63 bytes; else `<prefix><readable part>~<hash>`, the
 * readable part being the id's start with each other character shown as `?`. Always
 * printable ASCII within 63 bytes, so it reads back exactly as it was set.
 */
export function applicationName(id: string, prefix = 'pgleaderlock:'): string {
  const full = `${prefix}${id}`;
  // an ASCII id shaped like a hashed name is hashed too: no two ids share a name
  if (isPrintableAscii(full) && full.length <= NAME_BYTES && !HASHED.test(id)) return full;
  const room = NAME_BYTES - prefix.length - 1 - HASH_CHARS;
  const readable = [...id]
    .map((ch) => (isPrintableAscii(ch) ? ch : '?'))
    .join('')
    .slice(0, Math.max(0, room));
  return `${prefix}${readable}~${hashOf(id)}`;
}

/** Whether `id` is carried verbatim by its application_name (else statements carry it: `idTag`). */
export function namedVerbatim(id: string, prefix = 'pgleaderlock:'): boolean {
  return applicationName(id, prefix) === `${prefix}${id}`;
}

/**
 * The comment a statement carries after its priority for an id its application_name cannot
 * carry (` /* id="…" *\/`); empty otherwise. JSON with `/` and every non-ASCII character
 * escaped: it survives any database encoding and never ends or opens a comment.
 */
export function idTag(id: string): string {
  if (namedVerbatim(id)) return '';
  const json = JSON.stringify(id).replace(
    /[\u007f-\uffff/]/g,
    (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
  return ` /* id=${json} */`;
}

/** The id in a statement's id comment (`idTag`), or null (none, or cut off by the view). */
export function idInQuery(query: string | null): string | null {
  const m = /\/\* id=("(?:[^"\\]|\\.)*") \*\//.exec(query ?? '');
  if (!m) return null;
  try {
    const id: unknown = JSON.parse(m[1] as string);
    return typeof id === 'string' ? id : null;
  } catch {
    return null;
  }
}

/**
 * The candidate id of a session, from its application_name and last statement: the id its
 * statement carries when that is the one its name stands for, else the name's id part (the
 * id itself when carried verbatim; the readable part and hash otherwise). Null when the
 * session is not a `prefix` session (another program, a watch).
 */
export function idOfSession(
  name: string | null,
  query: string | null,
  prefix = 'pgleaderlock:',
): string | null {
  if (name === null || !name.startsWith(prefix)) return null;
  const tagged = idInQuery(query);
  if (tagged !== null && applicationName(tagged, prefix) === name) return tagged;
  return name.slice(prefix.length);
}

/** Whether the session named `name` (its application_name) is candidate `id`. */
export function isNamed(name: string | null, id: string, prefix = 'pgleaderlock:'): boolean {
  return name !== null && name === applicationName(id, prefix);
}

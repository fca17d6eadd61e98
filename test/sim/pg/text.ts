/**
 * How the simulated server shows text and settings: application_name through
 * pg_clean_ascii and cut at 63 bytes, pg_stat_activity.query cut at 1 kB, a time setting
 * as set_config returns it, and the literals pg.escapeLiteral writes, read back.
 */

/** PostgreSQL's pg_clean_ascii (PG16+): each byte outside 32..126 becomes `\xNN`. */
export function cleanAscii(s: string): string {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    out += b >= 32 && b <= 126 ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`;
  }
  return out;
}

/** application_name as pg_stat_activity shows it: cleaned, then cut to NAMEDATALEN - 1 = 63 bytes. */
export function shownApplicationName(s: string): string {
  return cleanAscii(s).slice(0, 63);
}

/** pg_stat_activity.query: cut to track_activity_query_size - 1 = 1023 bytes on a character boundary. */
export function shownQuery(s: string): string {
  // a UTF-16 code unit is at most 3 bytes of UTF-8: a short text needs no count
  if (s.length <= 341) return s;
  const buf = Buffer.from(s, 'utf8');
  if (buf.length <= 1023) return s;
  let end = 1023;
  while (end > 0 && ((buf[end] ?? 0) & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString('utf8');
}

/** A time setting as set_config returns it: the largest unit that divides it exactly. */
export function showMs(ms: number): string {
  if (ms === 0) return '0';
  for (const [unit, f] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['min', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms % f === 0) return `${ms / f}${unit}`;
  }
  return `${ms}ms`;
}

/** A literal as pg.escapeLiteral writes it (`'…'`, or ` E'…'` with backslashes), read back. */
export const LIT = String.raw`(?: ?E'(?:[^'\\]|''|\\\\)*'|'(?:[^']|'')*')`;
export function unquote(lit: string): string {
  const t = lit.trim();
  if (t.startsWith("E'")) return t.slice(2, -1).replaceAll("''", "'").replaceAll('\\\\', '\\');
  return t.slice(1, -1).replaceAll("''", "'");
}

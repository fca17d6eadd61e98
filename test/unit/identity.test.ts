/**
 * Ids and how other sessions read them back (src/core/identity.ts): application_name keeps
 * 63 bytes and escapes every byte outside printable ASCII, so it carries a name that
 * survives intact, and statements carry an id that name cannot.
 */
import { describe, expect, it } from 'vitest';
import {
  applicationName,
  checkId,
  idInQuery,
  idOfSession,
  idTag,
  MAX_ID_LENGTH,
  namedVerbatim,
} from '../../src/core/identity.js';
import { PENDING_STATEMENT, priorityOf, tagged } from '../../src/leader/sql.js';

/** What PostgreSQL keeps of an application_name (pg_clean_ascii, then NAMEDATALEN - 1 bytes). */
function asServerKeeps(name: string): string {
  const bytes = Buffer.from(name, 'utf8');
  let out = '';
  for (const b of bytes) out += b >= 0x20 && b <= 0x7e ? String.fromCharCode(b) : `\\x${b.toString(16)}`;
  return out.slice(0, 63);
}

const ids = [
  'worker-1',
  `billing-scheduler-deployment-7f9c8d6b5-x2k9p-1234-abc123`, // a pod's default id: 57 bytes
  'x'.repeat(MAX_ID_LENGTH),
  'höher-priorität',
  'кандидат-1',
  'emoji-😀-id',
  'quote"back\\slash*/end/*',
  `a${'é'.repeat(60)}`,
];

describe('applicationName', () => {
  it('is kept by PostgreSQL exactly as set, for every id the constructor accepts', () => {
    for (const id of ids) {
      const name = applicationName(id);
      expect(asServerKeeps(name)).toBe(name);
      expect(name.startsWith('pgleaderlock:')).toBe(true);
    }
  });

  it('carries a printable ASCII id that fits verbatim, and others as a readable start and a hash', () => {
    expect(applicationName('worker-1')).toBe('pgleaderlock:worker-1');
    expect(namedVerbatim('worker-1')).toBe(true);
    const name = applicationName('höher-priorität');
    expect(name).toMatch(/^pgleaderlock:h\?her-priorit\?t~[a-z2-7]{13}$/);
    expect(applicationName('x'.repeat(51))).toMatch(/^pgleaderlock:x{36}~[a-z2-7]{13}$/);
    expect(applicationName('x'.repeat(50))).toBe(`pgleaderlock:${'x'.repeat(50)}`);
    expect(applicationName('w', 'pgleaderlock-watch:')).toBe('pgleaderlock-watch:w');
  });

  it('gives an ASCII id shaped like a hashed name a hashed name too: no two ids share one', () => {
    const other = applicationName('höher-priorität');
    const lookalike = other.slice('pgleaderlock:'.length);
    expect(applicationName(lookalike)).not.toBe(other);
    expect(applicationName(lookalike)).toMatch(/~[a-z2-7]{13}$/);
  });

  it('gives different names to ids that share their first 63 bytes or differ only outside ASCII', () => {
    const long = 'p'.repeat(70);
    const names = new Set([
      applicationName(`${long}-a`),
      applicationName(`${long}-b`),
      applicationName('ä1'),
      applicationName('ö1'),
    ]);
    expect(names.size).toBe(4);
  });
});

describe('the id in statements', () => {
  it('reads back every id exactly from a tagged statement, which never ends or nests its comment', () => {
    for (const id of ids) {
      const sql = tagged('/* pgleaderlock:check */ SELECT 1', { priority: 7, id }, true);
      // ASCII only, and every comment opens and closes in turn, closing before the statement
      expect(/^[\x20-\x7e]*$/.test(sql)).toBe(true);
      const marks = [...sql.matchAll(/\/\*|\*\//g)].map((m) => m[0]);
      expect(marks).toEqual(marks.map((_, i) => (i % 2 === 0 ? '/*' : '*/')));
      expect(sql.endsWith('*/ SELECT 1')).toBe(true);
      expect(priorityOf(sql)).toBe(7);
      expect(idOfSession(applicationName(id), sql)).toBe(id);
    }
  });

  it('keeps the priority readable when the view cuts the id off (track_activity_query_size down to 100 bytes)', () => {
    const sql = tagged('/* pgleaderlock:wait-lock */ SELECT 1', {
      priority: 10,
      id: `höher-${'ä'.repeat(100)}`,
    });
    for (const size of [100, 200, 500]) {
      const cut = sql.slice(0, size);
      expect(priorityOf(cut)).toBe(10);
      expect(idInQuery(cut)).toBeNull(); // then the name's part is shown (idOfSession)
    }
  });

  it('adds nothing for an id the name carries, and the pending mark still reads as pending', () => {
    expect(idTag('worker-1')).toBe('');
    expect(tagged('/* pgleaderlock:check */ SELECT 1', { priority: 2, id: 'worker-1' })).toBe(
      '/* pgleaderlock:check */ /* p=2 */ SELECT 1',
    );
    const pending = tagged('/* pgleaderlock:check */ SELECT 1', { priority: 2, id: 'höher' }, true);
    // PENDING_STATEMENT's LIKE pattern, as a regular expression
    const like = PENDING_STATEMENT.match(/LIKE '([^']+)'\)$/)?.[1] ?? '';
    const re = new RegExp(`^${like.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replaceAll('%', '.*')}$`);
    expect(re.test(pending)).toBe(true);
  });

  it("does not take a statement's id for another session's name", () => {
    const sql = tagged('SELECT 1', { priority: 0, id: 'höher-a' });
    expect(idInQuery(sql)).toBe('höher-a');
    // a session named for another id: the name's part, not the statement's id
    const other = applicationName('höher-b');
    expect(idOfSession(other, sql)).toBe(other.slice('pgleaderlock:'.length));
    expect(idOfSession('psql', sql)).toBeNull();
    expect(idOfSession(null, sql)).toBeNull();
  });
});

describe('checkId', () => {
  it('accepts printable Unicode up to the limit and refuses the rest, naming the option and the value', () => {
    for (const id of ids) expect(checkId('id', id)).toBe(id);
    expect(() => checkId('id', '')).toThrow(/^id must be a string of 1 to 128 characters, received ""$/);
    expect(() => checkId('id', 'x'.repeat(129))).toThrow(/id must be a string of 1 to 128 characters/);
    expect(() => checkId('id', 42)).toThrow(/received 42/);
    expect(() => checkId('id', 'a\u0000b')).toThrow(/id must be printable/);
    expect(() => checkId('id', 'a\nb')).toThrow(/must be printable/);
    expect(() => checkId('id', 'a\u0085b')).toThrow(/must be printable/);
    expect(() => checkId('id', 'a\ud800b')).toThrow(/id must be printable/);
    for (const hidden of ['a\u202eb', 'a\u200bb', '\ufeffab', 'a\ue000b', 'a\uffffb']) {
      expect(() => checkId('id', hidden)).toThrow(/id must be printable/);
    }
  });
});

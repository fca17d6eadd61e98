/** `inline` (src/core/statements.ts): values written as literals for the simple query protocol. */
import { describe, expect, it } from 'vitest';
import { inline } from '../../src/core/statements.js';
import { WAIT_LOCK } from '../../src/leader/sql.js';
import { uninline } from './fakes.js';

describe('inline', () => {
  it('writes integers in parentheses, strings quoted (quotes and backslashes escaped), null as NULL; $10 is not $1', () => {
    const sql = inline('SELECT $1::int4, $2, $3::text, $10', [-5, "it's \\ here", null, 0, 0, 0, 0, 0, 0, 7]);
    expect(sql).toBe(`SELECT (-5)::int4,  E'it''s \\\\ here', NULL::text, (7)`); // the driver puts a space before E
  });

  it('refuses a missing value and a number that is not a safe integer', () => {
    expect(() => inline('SELECT $2', [1])).toThrow(RangeError);
    expect(() => inline('SELECT $1', [1.5])).toThrow(/must be an integer, got 1.5/);
  });

  it('the wait-lock statement round-trips through the unit fakes’ reader', () => {
    const values = [12, -34, "to'k\\en", null, 'acquired:x', 'pgleaderlock_c_22'];
    expect(uninline(WAIT_LOCK, inline(WAIT_LOCK, values))).toEqual(values);
  });
});

import { describe, expect, it } from 'vitest';
import { applicationName } from '../../src/core/connect.js';

describe('applicationName', () => {
  it('prefixes pgleaderlock: and keeps within 63 bytes on a character boundary', () => {
    expect(applicationName('worker-1')).toBe('pgleaderlock:worker-1');
    const long = applicationName('é'.repeat(40));
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(63);
    expect(long).not.toContain('\uFFFD');
    expect(long.startsWith('pgleaderlock:é')).toBe(true);
  });
});

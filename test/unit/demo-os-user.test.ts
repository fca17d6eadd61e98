/**
 * docs/cli.md, "pgleaderlock demo": as root, the demo runs the server as the `postgres` OS
 * user if there is one, else as `nobody`, and never creates a user (`osUser: 'existing'`,
 * src/cli/demo-common.ts). A child process with `id` and `useradd` shimmed on its PATH: a
 * machine with no `postgres` user.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

function withShims(mode: 'existing' | 'create'): { ids: unknown; useradd: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgl-shim-'));
  try {
    const log = path.join(dir, 'useradd.log');
    // `id -u postgres` fails (no such user); `id -u nobody` answers 65534
    fs.writeFileSync(
      path.join(dir, 'id'),
      `#!/bin/sh\n[ "$2" = "postgres" ] && { echo "id: postgres: no such user" >&2; exit 1; }\necho 65534\n`,
      { mode: 0o755 },
    );
    fs.writeFileSync(path.join(dir, 'useradd'), `#!/bin/sh\necho "$@" >> ${log}\nexit 1\n`, { mode: 0o755 });
    const script = `import { serverIds } from './src/cli/pg-user.ts';
      let ids; try { ids = serverIds(${JSON.stringify(mode)}); } catch (e) { ids = 'threw'; }
      console.log(JSON.stringify(ids ?? null));`;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      env: { ...process.env, PATH: `${dir}:${process.env.PATH}` },
      encoding: 'utf8',
    });
    return { ids: JSON.parse(out.trim()), useradd: fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '' };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// each test starts a Node process with tsx (about 0.6 s alone; 5.2 s, past the unit
// project's 5 s, in a full unit run beside a mutation run at load 6): a timeout of its own
describe.runIf(isRoot)(
  'the OS user of the demo server, as root, on a machine without a postgres user',
  { timeout: 30_000 },
  () => {
    it("the demo's mode ('existing'): runs as nobody, never calls useradd", () => {
      const r = withShims('existing');
      expect(r.ids).toEqual({ uid: 65534, gid: 65534 });
      expect(r.useradd).toBe('');
    });

    it("the tests' mode ('create') would call useradd (the shim sees it: the check above can fail)", () => {
      const r = withShims('create');
      expect(r.useradd).toMatch(/postgres/);
    });
  },
);

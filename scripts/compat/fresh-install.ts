/**
 * A fresh install of the project with npm 12 (docs/testing.md, "Install scripts"): the
 * project's files copied without node_modules, then `npm ci` with the pinned npm under a
 * downloaded Node. npm 12 blocks the install scripts that `allowScripts` in package.json does
 * not approve and names them in a warning; the install must print no such warning. The
 * Node.js line that uses it then runs its suites, build and smoke test from the copy, so the
 * denied scripts are shown not to be needed.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fetchPackage } from './fetch.js';
import { stopWhenInterrupted } from './vitest.js';

/** npm 12 needs Node ^22.22.2, ^24.15.0 or >= 26. */
export const NPM_VERSION = '12.2.1';

/** Top-level entries not copied: installed, built or generated, or the repository itself. */
const SKIP = new Set(['node_modules', 'dist', '.git', 'coverage', 'api-docs', '.tmp', '.scratch']);

export interface FreshInstall {
  /** The copy, with its own node_modules. */
  dir: string;
  /** `node <npm-cli.js>`: run npm 12 under that Node. */
  npm: string[];
  /** The install's output lines that mention install scripts (must be none). */
  scriptWarnings: string[];
  /** Every `npm warn` line, for the report. */
  warnings: string[];
  /** The install's whole output, passed through or (`out` null) held back. */
  output: string;
  /** How long `npm ci` took (ms). */
  ms: number;
  code: number;
}

/** Run a command, its output kept and passed to `out` (a file descriptor; undefined: stdout; null: nowhere). */
function capture(
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv },
  out: number | undefined | null,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    if (stopWhenInterrupted(child)) child.kill('SIGTERM'); // the driver stopping: not begun
    let output = '';
    const keep = (d: Buffer): void => {
      output += d.toString();
      if (out === undefined) process.stdout.write(d);
      else if (out !== null) fs.writeSync(out, d);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.once('error', (err) => resolve({ code: -1, output: `${output}${String(err)}\n` }));
    child.once('close', (code) => resolve({ code: code ?? -1, output }));
  });
}

/**
 * Copy the project at `root` to a temporary folder and `npm ci` it there with npm 12 under
 * `node`; its output goes to the file descriptor `out`, else to stdout, or (null) is only
 * kept in the result.
 */
export async function freshInstall(
  root: string,
  node: string,
  env: NodeJS.ProcessEnv,
  out?: number | null,
): Promise<FreshInstall> {
  const npmDir = await fetchPackage('npm', NPM_VERSION, `npm-${NPM_VERSION}`);
  const npm = [node, path.join(npmDir, 'bin', 'npm-cli.js')];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-fresh-'));
  fs.chmodSync(dir, 0o755); // the test servers run as the postgres OS user when root
  for (const entry of fs.readdirSync(root)) {
    if (SKIP.has(entry)) continue;
    fs.cpSync(path.join(root, entry), path.join(dir, entry), { recursive: true });
  }
  const say = `[compat] npm ${NPM_VERSION} ci in ${dir}\n`;
  if (out === undefined) process.stdout.write(say);
  else if (out !== null) fs.writeSync(out, say);
  const [command = node, ...args] = npm;
  // as from a shell: without the npm_config_* variables of the npm that runs this suite
  const installEnv = Object.fromEntries(Object.entries(env).filter(([k]) => !/^npm_config_/i.test(k)));
  const t0 = Date.now();
  const { code, output } = await capture(
    command,
    [...args, 'ci', '--no-audit', '--no-fund'],
    {
      cwd: dir,
      env: installEnv,
    },
    out,
  );
  const lines = output.split('\n');
  return {
    dir,
    npm,
    code,
    output: `${say}${output}`,
    ms: Date.now() - t0,
    scriptWarnings: lines.filter((l) => /install.scripts?/i.test(l)),
    warnings: lines.filter((l) => /^npm warn/i.test(l)),
  };
}

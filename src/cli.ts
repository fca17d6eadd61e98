#!/usr/bin/env node
/**
 * The `pgleaderlock` command. Reserved: the commands (run, acquire, status, break, demo)
 * arrive in a later release; for now it answers --help and --version.
 */
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { version } = require('../package.json') as { version: string };

const HELP = `pgleaderlock ${version}: leader election on PostgreSQL advisory locks

Usage: pgleaderlock [--help | --version]

The commands run, acquire, status, break and demo are not available in this version.
Use the library: import { LeaderLock } from 'pgleaderlock'.
`;

const args = process.argv.slice(2);
if (args.includes('--version') || args.includes('-v')) {
  process.stdout.write(`${version}\n`);
} else if (args.length === 0 || args.includes('--help') || args.includes('-h')) {
  process.stdout.write(HELP);
} else {
  process.stderr.write(`pgleaderlock: unknown command ${JSON.stringify(args[0])} (try --help)\n`);
  process.exitCode = 2;
}

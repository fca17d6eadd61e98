#!/usr/bin/env node
/**
 * The `pgleaderlock` command: run, acquire, status, break, resign, handover, doctor, demo (and the unlisted
 * partition-worker that `demo --partitions` runs). Each command's options are one table (src/cli/*.ts) that both parses and prints `--help`. Bad input exits 2 with
 * one line naming the problem (passwords redacted); `--debug` adds the stack.
 */
import { createRequire } from 'node:module';
import { inspect as formatValue } from 'node:util';
import { ACQUIRE_OPTIONS, acquire } from './cli/acquire.js';
import {
  type Dsn,
  type Keys,
  type OptionSpec,
  parse,
  resolveDsn,
  resolveKeys,
  scrub,
  UsageError,
  type Values,
} from './cli/args.js';
import { BREAK_OPTIONS, breakLock } from './cli/break.js';
import {
  CliExit,
  DEBUG_OPTION,
  DSN_OPTION,
  EXIT,
  explain,
  HELP_OPTION,
  handleClosedOutput,
  JSON_OPTION,
  KEY_OPTIONS,
  Output,
} from './cli/common.js';
import { DEMO_OPTIONS, demo } from './cli/demo.js';
import { PARTITION_WORKER_OPTIONS, partitionWorker } from './cli/demo-partitions.js';
import { DOCTOR_OPTIONS, doctor, doctorKeys } from './cli/doctor.js';
import { HANDOVER_OPTIONS, RESIGN_OPTIONS, request } from './cli/request.js';
import { RUN_OPTIONS, run } from './cli/run.js';
import { partitionStatus, STATUS_OPTIONS, status } from './cli/status.js';

const require = createRequire(import.meta.url);
const { version } = require('../package.json') as { version: string };

interface Command {
  summary: string;
  usage: string;
  options: OptionSpec[];
  /** Options that may appear bare, e.g. `--wait`. */
  optionalValue?: string[];
  /** Takes a command after `--`. */
  rest?: boolean;
  /** Not listed in the help: an entry point for the demo's children. */
  hidden?: boolean;
  exec(values: Values, rest: string[]): Promise<number>;
}

/** The key first (the likelier mistake), then the database. */
const target = (v: Values): [Dsn, Keys] => {
  const keys = resolveKeys(v);
  return [resolveDsn(v), keys];
};

const COMMON = [DSN_OPTION, ...KEY_OPTIONS];
const TAIL = [DEBUG_OPTION, HELP_OPTION];
const stdout = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

const COMMANDS: Record<string, Command> = {
  run: {
    summary: 'join the election and log every transition until SIGINT/SIGTERM',
    usage: 'pgleaderlock run (--key1 N --key2 N | --name NAME) [options]',
    options: [...COMMON, ...RUN_OPTIONS, JSON_OPTION, ...TAIL],
    exec: (v) => run(v, ...target(v), new Output(v.json === true)),
  },
  acquire: {
    summary: 'take the lock once (or --wait for it); with -- COMMAND, run it while leader',
    usage:
      'pgleaderlock acquire (--key1 N --key2 N | --name NAME) [--wait[=DURATION]] [options] [-- COMMAND [ARGS…]]',
    options: [...COMMON, ...ACQUIRE_OPTIONS, JSON_OPTION, ...TAIL],
    optionalValue: ['wait'],
    rest: true,
    exec: (v, rest) => acquire(v, ...target(v), rest, new Output(v.json === true, process.stderr)),
  },
  status: {
    summary: 'show who holds the key and who waits (informational)',
    usage: 'pgleaderlock status (--key1 N --key2 N | --name NAME [--partitions N]) [--dsn URL] [--json]',
    options: [...COMMON, ...STATUS_OPTIONS, JSON_OPTION, ...TAIL],
    exec: (v) =>
      v.partitions === undefined
        ? status(...target(v), v.json === true, process.stdout)
        : partitionStatus(v, ...target(v), v.json === true, process.stdout),
  },
  break: {
    summary: 'terminate the backend holding the key (abandoned holders), with --yes',
    usage: 'pgleaderlock break (--key1 N --key2 N | --name NAME) --yes [--min-age DURATION]',
    options: [...COMMON, ...BREAK_OPTIONS, ...TAIL],
    exec: (v) => breakLock(v, ...target(v), stdout),
  },
  resign: {
    summary: 'ask the leader to step down cleanly (it releases; a waiter leads); not break',
    usage: 'pgleaderlock resign (--key1 N --key2 N | --name NAME) [--timeout DURATION] [--json]',
    options: [...COMMON, ...RESIGN_OPTIONS, JSON_OPTION, ...TAIL],
    exec: (v) => request('resign', v, ...target(v), v.json === true, process.stdout),
  },
  handover: {
    summary: 'ask the leader to hand leadership to the waiting candidate --to ID',
    usage: 'pgleaderlock handover (--key1 N --key2 N | --name NAME) --to ID [--timeout DURATION] [--json]',
    options: [...COMMON, ...HANDOVER_OPTIONS, JSON_OPTION, ...TAIL],
    exec: (v) => request('handover', v, ...target(v), v.json === true, process.stdout),
  },
  doctor: {
    summary: 'check the connection path before relying on it: pooler, primary, settings, permissions',
    usage: 'pgleaderlock doctor [--dsn URL] [--name NAME | --key1 N --key2 N] [--offline] [--json]',
    options: [...COMMON, ...DOCTOR_OPTIONS, JSON_OPTION, ...TAIL],
    exec: (v) => {
      const keys = doctorKeys(v);
      return doctor(v, resolveDsn(v), keys, v.json === true, process.stdout);
    },
  },
  demo: {
    summary: 'watch an election and failovers; needs no database (starts an embedded PostgreSQL)',
    usage:
      'pgleaderlock demo [--candidates N] [--interval DURATION] [--failovers N] [--partitions P] [--dsn URL]',
    options: [
      { ...DSN_OPTION, default: 'an embedded PostgreSQL', help: 'use this server instead' },
      { ...KEY_OPTIONS[2]!, default: 'demo-<random>', help: 'lock name the candidates compete for' },
      ...DEMO_OPTIONS,
      ...TAIL,
    ],
    exec: (v) => demo(v, stdout),
  },
  'partition-worker': {
    summary: 'one PartitionedLeadership worker printing JSON lines (what `demo --partitions` runs)',
    usage: 'pgleaderlock partition-worker --name NAME --partitions P [--id ID] [--dsn URL]',
    options: [DSN_OPTION, KEY_OPTIONS[2]!, ...PARTITION_WORKER_OPTIONS, ...TAIL],
    hidden: true,
    exec: (v) => partitionWorker(v, resolveDsn(v), resolveKeys(v)),
  },
};

const listed = Object.entries(COMMANDS).filter(([, c]) => !c.hidden);

function optionLine(o: OptionSpec): string {
  const flag = `${o.short ? `-${o.short}, ` : ''}--${o.name}${o.value ? ` ${o.value}` : ''}`;
  const dflt = o.default ? ` (default: ${o.default})` : '';
  return `  ${flag.padEnd(28)} ${o.help}${dflt}`;
}

function commandHelp(name: string): string {
  const c = COMMANDS[name];
  if (!c) return mainHelp();
  return [
    `pgleaderlock ${name}: ${c.summary}`,
    '',
    `Usage: ${c.usage}`,
    '',
    'Options:',
    ...c.options.map(optionLine),
    '',
    'Durations: milliseconds (250) or with a unit (250ms, 5s, 2m, 1h).',
    'Exit codes: see docs/cli.md, or `pgleaderlock --help`.',
    '',
  ].join('\n');
}

function mainHelp(): string {
  return [
    `pgleaderlock ${version}: leader election on PostgreSQL advisory locks`,
    '',
    'Usage: pgleaderlock <command> [options]     pgleaderlock <command> --help',
    '',
    'Commands:',
    ...listed.map(([n, c]) => `  ${n.padEnd(9)} ${c.summary}`),
    '',
    'The database: --dsn, else $PG_DSN, else $DATABASE_URL (else the PG* variables if PGHOST is set).',
    'The key: --key1 and --key2 (32-bit signed integers), or --name (hashed to two keys).',
    '',
    'Exit codes: 0 ok; 1 not acquired / refused; 2 bad input, unreachable database or no permission;',
    `  ${EXIT.LOST} leadership lost; ${EXIT.CANNOT_RUN} command not found; otherwise the command's own status.`,
    '',
    '  -v, --version    print the version',
    '',
  ].join('\n');
}

/** Connection strings the user may have given, to scrub from --debug output. */
function knownDsns(args: string[]): string[] {
  const flag = args.flatMap((a, i) =>
    a === '--dsn' ? [args[i + 1] ?? ''] : a.startsWith('--dsn=') ? [a.slice(6)] : [],
  );
  return [...flag, process.env.PG_DSN ?? '', process.env.DATABASE_URL ?? ''].filter((d) => d !== '');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(name === 'help' && args[0] ? commandHelp(args[0]) : mainHelp());
    return EXIT.OK;
  }
  if (name === '--version' || name === '-v') {
    stdout(version);
    return EXIT.OK;
  }
  const command = COMMANDS[name];
  const debug = argv.includes('--debug');
  try {
    if (!command)
      throw new UsageError(
        `unknown command ${JSON.stringify(name)} (commands: ${listed.map(([n]) => n).join(', ')})`,
      );
    const split = args.indexOf('--');
    const own = split === -1 ? args : args.slice(0, split);
    if (own.includes('--help') || own.includes('-h')) {
      process.stdout.write(commandHelp(name));
      return EXIT.OK;
    }
    const { values, rest } = parse(args, command.options, command.optionalValue);
    if (rest.length > 0 && !command.rest) throw new UsageError(`${name} takes no command after --`);
    return await command.exec(values, rest);
  } catch (err) {
    const code = err instanceof UsageError ? EXIT.USAGE : err instanceof CliExit ? err.exitCode : EXIT.USAGE;
    const where = command ? `pgleaderlock ${name}` : 'pgleaderlock';
    const message = err instanceof UsageError || err instanceof CliExit ? err.message : explain(err);
    process.stderr.write(`${where}: ${message}\n`);
    if (debug) process.stderr.write(`${knownDsns(args).reduce((t, d) => scrub(t, d), formatValue(err))}\n`);
    else if (!(err instanceof UsageError || err instanceof CliExit)) {
      process.stderr.write('(run with --debug for details)\n');
    }
    return code;
  }
}

handleClosedOutput();
main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`pgleaderlock: ${explain(err)}\n`);
    process.exitCode = EXIT.USAGE;
  },
);

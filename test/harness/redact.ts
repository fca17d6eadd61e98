/** Replace the password in a connection string with `***` (the CLI's own redaction). */
export { redact as redactUrl } from '../../src/cli/args.js';

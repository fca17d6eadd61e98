/**
 * Seeing (or changing) what a client sends: every `client.query(...)` routed through a hook.
 * Tests use it through a lock's or a worker's `connect` option, to stamp, count, delay or
 * replace the statements of the library's own clients; the benchmark to time them.
 */
import pg from 'pg';

/** Called for each `query(...)` with its arguments and the client's own `query`, to send them on (or not). */
export type QueryHook = (args: unknown[], send: (...args: unknown[]) => unknown) => unknown;

/** The SQL text of a `query(...)` call: its string, or its config object's `text`. */
export function statementText(args: readonly unknown[]): string {
  const [first] = args;
  if (typeof first === 'string') return first;
  return (first as { text?: unknown } | null)?.text?.toString() ?? '';
}

/** The statement's name in a pgleaderlock statement (`/* pgleaderlock:<name> *\/`), else `other`. */
export function statementName(args: readonly unknown[]): string {
  return /pgleaderlock:([a-z-]+)/.exec(statementText(args))?.[1] ?? 'other';
}

/** Route every `client.query(...)` through `hook`, from now on. */
export function interceptQueries<C extends pg.Client>(client: C, hook: QueryHook): C {
  const send = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) =>
    hook(args, send);
  return client;
}

/** A `connect` option: a new client on `url`, its `'error'` handled, its queries through `hook`. */
export function interceptingConnect(url: string | (() => string), hook: QueryHook): () => Promise<pg.Client> {
  return async () => {
    const client = new pg.Client({ connectionString: typeof url === 'string' ? url : url() });
    client.on('error', () => {});
    await client.connect();
    return interceptQueries(client, hook);
  };
}

/** `provisioner operations …`: a tenant's operations and their logs (followed live with --follow). */
import type { Command } from 'commander';
import { commandContext, type Io } from './command-context.ts';
import { age, table } from './format.ts';

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'superseded']);

export function addOperationCommands(program: Command, io: Io): void {
  const { client, json, print } = commandContext(program, io);

  const ops = program.command('operations').description('operations and their logs');
  ops
    .command('list <tenantId>')
    .option('--limit <n>', 'how many', '20')
    .action(async (tenantId: string, o: { limit: string }) => {
      const page = await client().call('GET /v1/tenants/:id/operations', {
        params: { id: tenantId },
        query: { limit: Number(o.limit) }, // as given: the API checks it
      });
      print(page, () =>
        table(
          ['ID', 'KIND', 'STATE', 'ATTEMPT', 'FROM', 'TO', 'AGE', 'ERROR'],
          page.items.map((p) => [
            p.id,
            p.kind,
            p.state,
            p.attempt,
            p.fromVersion,
            p.toVersion,
            age(p.createdAt),
            p.error?.message,
          ]),
        ),
      );
    });
  ops.command('get <id>').action(async (id: string) => {
    const p = await client().call('GET /v1/operations/:id', { params: { id } });
    print(p, () =>
      table(
        ['FIELD', 'VALUE'],
        Object.entries(p).map(([k, v]) => [k, typeof v === 'object' && v !== null ? JSON.stringify(v) : (v as string)]),
      ),
    );
  });
  ops
    .command('logs <id>')
    .option('-f, --follow', 'stream new lines until the operation ends')
    .action(async (id: string, o: { follow?: boolean }) => {
      if (!o.follow) {
        const log = await client().call('GET /v1/operations/:id/log', { params: { id } });
        print(log, () => log.items.map((l) => l.line).join('\n'));
        return;
      }
      let state = 'unknown';
      const started = Date.now();
      for await (const ev of client().events('GET /v1/operations/:id/log', {
        params: { id },
        query: { follow: '1' },
      })) {
        if (ev.event === 'line') {
          const l = ev.data;
          io.out(json() ? JSON.stringify(l) : l.line);
        } else if (ev.event === 'state') {
          const s = ev.data;
          if (s.state !== state && !json())
            io.err(`-- operation ${id}: ${s.state} (${Math.round((Date.now() - started) / 1000)}s)`);
          state = s.state;
        } else if (ev.event === 'end') {
          state = ev.data.state;
          if (!json()) io.err(`-- operation ${id} ended: ${state}`);
        }
      }
      if (!TERMINAL.has(state)) throw new Error(`log stream ended before the operation finished (state ${state})`);
      if (state === 'failed') throw new Error(`operation ${id} failed`);
    });
}

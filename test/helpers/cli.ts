/**
 * The CLI run in the test's process (provisioner/cli/main.ts) against a provisioner at `url` with
 * `token`: its exit code and what it printed, as a user would see them.
 */
import { main } from '../../provisioner/cli/main.ts';

export interface CliRun {
  code: number;
  out: string;
  err: string;
}

export function cliAgainst(url: string, token: string): (args: string[]) => Promise<CliRun> {
  return async (args) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await main(['--url', url, '--token', token, ...args], {
      out: (s) => out.push(s),
      err: (s) => err.push(s),
      env: {},
    });
    return { code, out: out.join('\n'), err: err.join('\n') };
  };
}

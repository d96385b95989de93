/**
 * Where the e2e tier's CPU goes, per file: preloaded into every test process of the tier by
 * scripts/test.sh (`NODE_OPTIONS=--import=…`, with HRT_E2E_CPU_FILE set), it appends one JSON line
 * per e2e file when its process exits: the file, its wall time, the CPU of the process itself and
 * of every child it started and reaped (kube-apiservers, etcd, the provisioner and its Pulumi CLI
 * and provider plugin, vclusters, the runtime's pods: /proc/self/stat's cutime and cstime). A
 * child still running at exit is not counted (none should be: the harness stops them). The tier's
 * summary prints them beside the wall times (docs/toolchain.md).
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { relative } from 'node:path';

const file = process.env.HRT_E2E_CPU_FILE;
const script = process.argv[1] ?? '';
if (file && /test\/e2e\/[^/]+\.test\.ts$/.test(script)) {
  process.on('exit', () => {
    try {
      const stat = readFileSync('/proc/self/stat', 'utf8');
      // Fields after the command's closing parenthesis start at field 3 (state): utime is field 14.
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const [utime, stime, cutime, cstime] = [11, 12, 13, 14].map((i) => Number(f[i]) / 100);
      appendFileSync(
        file,
        JSON.stringify({
          file: relative(process.cwd(), script),
          wallSeconds: Math.round(process.uptime()),
          selfCpuSeconds: Math.round(utime! + stime!),
          childrenCpuSeconds: Math.round(cutime! + cstime!),
        }) + '\n',
      );
    } catch {
      // no /proc (not Linux): nothing to record
    }
  });
}

/**
 * Entry point of the GitOps Operator agent: `node runtime/agents/gitops-operator/main.ts`. Runs the
 * promotion engine (engine.ts) every POLL_MS, one round at a time, and serves /healthz (the
 * process runs), /readyz (the last round finished, or this replica stands by for the Lease's
 * holder) on PORT.
 */
import http from 'node:http';
import type { KubeTransport } from '../../kube/transport.ts';
import { agentKubeTransport } from '../common/kube.ts';
import { runService } from '../common/service.ts';
import { argoCdRepoCredentials } from '../source-server/credentials.ts';
import { loadOperatorConfig } from './config.ts';
import { PromotionEngine } from './engine.ts';
import { PromotionGit } from './git.ts';
import { sourceServerPreview } from './dry-run.ts';
import { PeriodicLoop } from '../../loops/periodic.ts';

let kube: KubeTransport | undefined;

await runService(
  'gitops-operator',
  () => {
    const config = loadOperatorConfig();
    kube = agentKubeTransport(config.kubeconfig);
    return config;
  },
  async (config, log) => {
    const engine = new PromotionEngine({
      kube: kube!,
      git: new PromotionGit({
        dir: config.gitWorkDir,
        // Argo CD's repository Secrets: the operator pushes with the credentials Argo CD pulls with.
        credentials: argoCdRepoCredentials(kube!, config.namespace),
        timeoutMs: config.gitTimeoutMs,
      }),
      namespace: config.namespace,
      identity: config.identity,
      author: config.author,
      syncTimeoutSeconds: config.syncTimeoutSeconds,
      ...(config.sourceServerUrl ? { preview: sourceServerPreview(config.sourceServerUrl, config.namespace) } : {}),
      log,
    });
    let lastRound: { at: number; ok: boolean; leader: boolean; error?: string } | undefined;
    // One round at a time; close() waits for the one in flight.
    const loop = new PeriodicLoop({
      name: 'promotions',
      round: async () => {
        const leader = await engine.tick();
        lastRound = { at: Date.now(), ok: true, leader };
      },
      intervalMs: () => config.pollMs,
      retryMs: () => config.pollMs,
      onFailure: (err) => {
        const error = err instanceof Error ? err.message : String(err);
        lastRound = { at: Date.now(), ok: false, leader: lastRound?.leader ?? false, error };
        log.warn({ err: error }, 'promotion round failed; the next one retries');
      },
    });
    await loop.start();
    const server = http.createServer((req, res) => {
      if (req.url === '/healthz') return void res.writeHead(200).end('ok');
      if (req.url === '/readyz') {
        const ok = lastRound !== undefined && lastRound.ok;
        return void res
          .writeHead(ok ? 200 : 503, { 'content-type': 'application/json' })
          .end(JSON.stringify({ ready: ok, ...lastRound }));
      }
      res.writeHead(404).end();
    });
    await new Promise<void>((ok) => server.listen(config.port, config.host, ok));
    log.info({ port: config.port, namespace: config.namespace, identity: config.identity }, 'gitops-operator started');
    return {
      close: async () => {
        await loop.stop();
        await new Promise<void>((ok) => server.close(() => ok()));
      },
    };
  },
);

/**
 * Entry point of the GitOps Operator agent: `node runtime/agents/gitops-operator/main.ts`. Runs the
 * promotion engine (engine.ts) every POLL_MS, one round at a time, and serves /healthz (the
 * process runs), /readyz (the last round finished, or this replica stands by for the Lease's
 * holder, and rounds keep ending: runtime/agents/common/health.ts; `at` is the last round's time,
 * `leader` whether this replica holds the Lease) on PORT.
 */
import type { KubeTransport } from '../../kube/transport.ts';
import { agentKubeTransport } from '../common/kube.ts';
import { AgentHealth, healthServer } from '../common/health.ts';
import { closeServer, listen, runService } from '../common/service.ts';
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
    // Argo CD's repository Secrets: the operator pushes with the credentials Argo CD pulls with,
    // and opens `action: pr`'s pull requests with their password as the provider's token.
    const credentials = argoCdRepoCredentials(kube!, config.namespace);
    const engine = new PromotionEngine({
      kube: kube!,
      git: new PromotionGit({ dir: config.gitWorkDir, credentials, timeoutMs: config.gitTimeoutMs }),
      credentials,
      ...(config.productsUrl ? { productLinkBase: config.productsUrl } : {}),
      namespace: config.namespace,
      identity: config.identity,
      author: config.author,
      syncTimeoutSeconds: config.syncTimeoutSeconds,
      ...(config.sourceServerUrl ? { preview: sourceServerPreview(config.sourceServerUrl, config.namespace) } : {}),
      log,
    });
    let lastRound: { at: number; ok: boolean; leader: boolean } | undefined;
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
        lastRound = { at: Date.now(), ok: false, leader: lastRound?.leader ?? false };
        log.warn({ err: error }, 'promotion round failed; the next one retries');
      },
    });
    const health = new AgentHealth({
      loops: [
        {
          loop,
          // A round may wait for Argo CD's syncs and push to Git.
          staleAfterMs: () => 3 * config.pollMs + config.syncTimeoutSeconds * 1000 + 2 * config.gitTimeoutMs,
        },
      ],
      checks: [{ name: 'promotions', read: () => ({ ready: true, fields: { ...lastRound } }) }],
    });
    await loop.start();
    const server = healthServer(health);
    await listen(server, config.port, config.host);
    log.info({ port: config.port, namespace: config.namespace, identity: config.identity }, 'gitops-operator started');
    return {
      close: async () => {
        await loop.stop();
        await closeServer(server);
      },
    };
  },
);

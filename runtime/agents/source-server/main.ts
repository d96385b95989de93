/** Entry point of the Source Server agent: `node runtime/agents/source-server/main.ts`. */
import type { KubeTransport } from '../../kube/transport.ts';
import { agentKubeTransport } from '../common/kube.ts';
import { runService } from '../common/service.ts';
import { buildSourceServer } from './app.ts';
import { ArgoCdClient } from './argocd.ts';
import { argoCdAccountSetup, argoCdTls } from './argocd-setup.ts';
import { SourceService } from './change.ts';
import { loadSourceServerConfig } from './config.ts';
import { argoCdRepoCredentials } from './credentials.ts';
import { GitMirrors } from './git.ts';

let kube: KubeTransport | undefined;

await runService(
  'source-server',
  () => {
    const config = loadSourceServerConfig();
    kube = agentKubeTransport(config.kubeconfig);
    return config;
  },
  async (config, log) => {
    const git = new GitMirrors({
      dir: config.gitCacheDir,
      credentials: argoCdRepoCredentials(kube!, config.argoCdNamespace),
      timeoutMs: config.gitTimeoutMs,
      refreshSeconds: config.gitRefreshSeconds,
    });
    await git.start();
    const tls =
      config.argoCdCaSecret !== undefined && config.argoCdServerUrl.startsWith('https:')
        ? argoCdTls({ kube: kube!, namespace: config.argoCdNamespace, secret: config.argoCdCaSecret, log })
        : undefined;
    const service = new SourceService({
      argo: new ArgoCdClient({
        serverUrl: config.argoCdServerUrl,
        username: config.argoCdUsername,
        password: config.argoCdPassword,
        timeoutMs: config.argoCdTimeoutMs,
        token: config.argoCdToken,
        tokenSource: config.argoCdTokenSource,
        setupAccount: config.argoCdAccountSetup
          ? argoCdAccountSetup({
              kube: kube!,
              namespace: config.argoCdNamespace,
              account: config.argoCdUsername,
              password: config.argoCdPassword,
              log,
            })
          : undefined,
        dispatcher: tls?.dispatcher,
      }),
      git,
      cacheMaxBytes: config.cacheMaxBytes,
      log,
    });
    const app = await buildSourceServer({ service, logger: log });
    await app.listen({ port: config.port, host: config.host });
    log.info(
      {
        port: config.port,
        argoCd: config.argoCdServerUrl,
        auth: config.argoCdToken ? 'token' : config.argoCdAccountSetup ? 'account (set up here)' : 'account',
        account: config.argoCdToken ? undefined : config.argoCdUsername,
        argoCdNamespace: config.argoCdNamespace,
        cacheMaxBytes: config.cacheMaxBytes,
      },
      'source-server started',
    );
    return { close: () => app.close() };
  },
);

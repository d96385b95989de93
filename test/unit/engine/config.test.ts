import t, { type Test } from 'tap';
import { ConfigError, loadConfig } from '../../../provisioner/config.ts';
import { LARGEST_RUN_MB } from '../../../provisioner/reconciler/memory-budget.ts';

/** loadConfig(env) must throw a ConfigError naming `variable` with a message matching `message`. */
function refused(t: Test, env: Record<string, string>, variable: string, message: RegExp): void {
  let err: unknown;
  try {
    loadConfig(env, '/');
  } catch (e) {
    err = e;
  }
  t.ok(err instanceof ConfigError && err.variable === variable, `${variable} named`);
  t.match((err as Error).message, message);
}

t.test('reconciler and engine settings: defaults', async (t) => {
  const c = loadConfig({ PROVISIONER_DATA_DIR: '/data', PORT: '9090' }, '/');
  t.same(c.reconciler, {
    workers: 2,
    engineMemoryMb: 2 * LARGEST_RUN_MB,
    clusterParallelism: 4,
    leaseTtlSeconds: 30,
    resyncSeconds: 86400,
    driftWatch: true,
    maxFailures: 5,
    backoffBaseSeconds: 10,
    backoffCapSeconds: 600,
    pollMs: 2000,
    shutdownGraceSeconds: 20,
    fleetClusterParallelism: 2,
  });
  t.match(c.engine, {
    kind: 'pulumi',
    backendUrl: undefined,
    secretsProvider: 'passphrase',
    pulumiHome: '/data/engine/.pulumi',
    publicUrl: 'http://127.0.0.1:9090',
  });
});

t.test(
  'the engine memory budget: by default the workers at the largest per-run estimate; 0 turns it off',
  async (t) => {
    t.equal(loadConfig({ PROVISIONER_WORKERS: '6' }, '/').reconciler.engineMemoryMb, 6 * LARGEST_RUN_MB);
    t.equal(loadConfig({ PROVISIONER_ENGINE_MEMORY_MB: '0' }, '/').reconciler.engineMemoryMb, 0);
    t.equal(loadConfig({ PROVISIONER_ENGINE_MEMORY_MB: '1536' }, '/').reconciler.engineMemoryMb, 1536);
  },
);

t.test('bad values are refused with the variable named', async (t) => {
  const bad: Array<[Record<string, string>, string, RegExp]> = [
    [{ PROVISIONER_WORKERS: '0' }, 'PROVISIONER_WORKERS', /outside 1\.\.256/],
    [{ PROVISIONER_ENGINE_MEMORY_MB: '2000000' }, 'PROVISIONER_ENGINE_MEMORY_MB', /outside 0\.\.1048576/],
    [{ PROVISIONER_ENGINE_MEMORY_MB: '2G' }, 'PROVISIONER_ENGINE_MEMORY_MB', /not a whole number/],
    [{ PROVISIONER_LEASE_TTL_SECONDS: 'soon' }, 'PROVISIONER_LEASE_TTL_SECONDS', /not a whole number/],
    [
      { PROVISIONER_BACKOFF_BASE_SECONDS: '60', PROVISIONER_BACKOFF_CAP_SECONDS: '30' },
      'PROVISIONER_BACKOFF_CAP_SECONDS',
      /below PROVISIONER_BACKOFF_BASE_SECONDS/,
    ],
    [{ PROVISIONER_ENGINE: 'terraform' }, 'PROVISIONER_ENGINE', /not one of pulumi, none/],
    [{ PULUMI_BACKEND_URL: 'mysql://x/y' }, 'PULUMI_BACKEND_URL', /scheme 'mysql:' is not supported/],
    [{ PROVISIONER_SECRETS_PROVIDER: 'rot13' }, 'PROVISIONER_SECRETS_PROVIDER', /must be 'passphrase' or a KMS URL/],
    [{ PROVISIONER_PUBLIC_URL: 'ftp://cp' }, 'PROVISIONER_PUBLIC_URL', /not supported/],
  ];
  for (const [env, variable, message] of bad) refused(t, env, variable, message);
  t.equal(
    loadConfig(
      {
        PROVISIONER_ENGINE: 'none',
        PROVISIONER_RESYNC_SECONDS: '0',
        PROVISIONER_SECRETS_PROVIDER: 'awskms://alias/pulumi',
      },
      '/',
    ).engine.kind,
    'none',
  );
});

t.test('chart repositories and the vcluster server template: parsed at start-up, bad values named', async (t) => {
  const ok = loadConfig(
    {
      PROVISIONER_CHART_REPOSITORIES:
        '{"argo": "/srv/charts", "vcluster": "oci://registry.internal/charts", "jetstack": "https://mirror.internal/jetstack"}',
      PROVISIONER_VCLUSTER_SERVER_TEMPLATE: 'https://{release}.{namespace}.clusters.internal:8443',
    },
    '/',
  );
  t.same(ok.engine.chartRepositories, {
    argo: '/srv/charts',
    vcluster: 'oci://registry.internal/charts',
    jetstack: 'https://mirror.internal/jetstack',
  });
  t.equal(ok.engine.vclusterServerTemplate, 'https://{release}.{namespace}.clusters.internal:8443');
  const unset = loadConfig({ PROVISIONER_CHART_REPOSITORIES: '', PROVISIONER_VCLUSTER_SERVER_TEMPLATE: '' }, '/');
  t.equal(unset.engine.chartRepositories, undefined, 'empty: upstream repositories');
  t.equal(unset.engine.vclusterServerTemplate, undefined, "empty: the program's default");
  t.equal(unset.engine.runtimeReleaseTimeoutSeconds, undefined, "unset release timeout: the program's default");
  t.equal(
    loadConfig({ PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS: '20' }, '/').engine.runtimeReleaseTimeoutSeconds,
    20,
    'PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS=20: the Argo releases wait 20 s',
  );

  const bad: Array<[Record<string, string>, RegExp]> = [
    [{ PROVISIONER_CHART_REPOSITORIES: '{argo: /srv}' }, /is not JSON/],
    [{ PROVISIONER_CHART_REPOSITORIES: '["/srv"]' }, /must be a JSON object/],
    [
      { PROVISIONER_CHART_REPOSITORIES: '{"argoo": "/srv"}' },
      /'argoo' is not a chart repository this product uses; known: argo, vcluster/,
    ],
    [{ PROVISIONER_CHART_REPOSITORIES: '{"argo": 7}' }, /'argo' must be a non-empty string/],
    [
      { PROVISIONER_CHART_REPOSITORIES: '{"argo": "charts"}' },
      /'argo': 'charts' is neither an http\(s\) URL, an oci:\/\/ URL nor a local path/,
    ],
    [
      { PROVISIONER_VCLUSTER_SERVER_TEMPLATE: 'https://{release}.{ns}.svc' },
      /placeholder other than \{release\} and \{namespace\}/,
    ],
    [{ PROVISIONER_VCLUSTER_SERVER_TEMPLATE: 'http://{release}.{namespace}.svc' }, /must be an https URL/],
    [{ PROVISIONER_VCLUSTER_SERVER_TEMPLATE: '{release}.{namespace}.svc' }, /is not a URL template/],
    [{ PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS: '0' }, /outside 1\.\.3600/],
    [{ PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS: 'soon' }, /not a whole number/],
  ];
  for (const [env, message] of bad) refused(t, env, Object.keys(env)[0]!, message);

  // One validator (tenants/config.ts): the tenants program also takes an http server, the provisioner only https.
  const { validateTenantInput } = await import('../../../tenants/config.ts');
  const { tenantInput } = await import('../pulumi/fixtures.ts');
  t.doesNotThrow(
    () => validateTenantInput(tenantInput({ vclusterServerTemplate: 'http://{release}.{namespace}.svc' })),
    'the tenants program accepts an http server template',
  );
  t.throws(
    () => validateTenantInput(tenantInput({ chartRepositories: { argo: 'charts' } })),
    { field: 'chartRepositories.argo', message: /'argo': 'charts' is neither an http\(s\) URL/ },
    'the tenants program refuses what the provisioner refuses, with the same words',
  );
});

t.test('tunnel limits: defaults from the tunnel server, each one settable, bad values named', async (t) => {
  const { DEFAULT_TUNNEL_LIMITS } = await import('../../../provisioner/tunnel/limits.ts');
  t.same(loadConfig({}, '/').tunnel, DEFAULT_TUNNEL_LIMITS);
  const c = loadConfig(
    {
      PROVISIONER_TUNNEL_MAX_PAYLOAD_BYTES: '2097152',
      PROVISIONER_TUNNEL_MAX_STREAMS: '64',
      PROVISIONER_TUNNEL_MAX_STREAMS_PER_TENANT: '128',
      PROVISIONER_TUNNEL_STREAM_WINDOW_BYTES: '65536',
      PROVISIONER_TUNNEL_MAX_CHUNK_BYTES: '131072',
      PROVISIONER_TUNNEL_MAX_HEADER_BYTES: '8192',
      PROVISIONER_TUNNEL_MAX_REQUEST_BODY_BYTES: '0',
      PROVISIONER_TUNNEL_REQUEST_TIMEOUT_SECONDS: '5',
      PROVISIONER_TUNNEL_IDLE_TIMEOUT_SECONDS: '60',
      PROVISIONER_TUNNEL_HEARTBEAT_SECONDS: '5',
      PROVISIONER_TUNNEL_HANDSHAKE_TIMEOUT_SECONDS: '3',
      PROVISIONER_TUNNEL_REVALIDATE_SECONDS: '0',
      PROVISIONER_TUNNEL_DRAIN_SECONDS: '30',
      PROVISIONER_TUNNEL_MAX_PENDING_HANDSHAKES: '100',
      PROVISIONER_TUNNEL_MAX_PENDING_HANDSHAKES_PER_TENANT: '2',
    },
    '/',
  );
  t.same(c.tunnel, {
    maxPayload: 2097152,
    maxStreams: 64,
    maxStreamsPerTenant: 128,
    streamWindow: 65536,
    maxChunkBytes: 131072,
    maxHeaderBytes: 8192,
    maxRequestBodyBytes: 0,
    requestTimeoutMs: 5000,
    idleTimeoutMs: 60_000,
    heartbeatIntervalMs: 5000,
    handshakeTimeoutMs: 3000,
    maxPendingHandshakes: 100,
    maxPendingHandshakesPerTenant: 2,
    revalidateIntervalMs: 0,
    drainTimeoutMs: 30_000,
  });
  const bad: Array<[Record<string, string>, string, RegExp]> = [
    [{ PROVISIONER_TUNNEL_MAX_STREAMS: '0' }, 'PROVISIONER_TUNNEL_MAX_STREAMS', /outside 1\.\.65535/],
    [
      { PROVISIONER_TUNNEL_MAX_REQUEST_BODY_BYTES: '64MB' },
      'PROVISIONER_TUNNEL_MAX_REQUEST_BODY_BYTES',
      /not a whole number/,
    ],
    [
      { PROVISIONER_TUNNEL_MAX_CHUNK_BYTES: '1048576' },
      'PROVISIONER_TUNNEL_MAX_CHUNK_BYTES',
      /leaves no room for the frame header/,
    ],
    [
      { PROVISIONER_TUNNEL_MAX_PAYLOAD_BYTES: '16384', PROVISIONER_TUNNEL_MAX_CHUNK_BYTES: '8192' },
      'PROVISIONER_TUNNEL_MAX_HEADER_BYTES',
      /does not fit/,
    ],
    [
      { PROVISIONER_TUNNEL_MAX_PENDING_HANDSHAKES_PER_TENANT: '0' },
      'PROVISIONER_TUNNEL_MAX_PENDING_HANDSHAKES_PER_TENANT',
      /outside 1\.\.1000/,
    ],
    [{ PROVISIONER_TUNNEL_HEARTBEAT_SECONDS: '0' }, 'PROVISIONER_TUNNEL_HEARTBEAT_SECONDS', /outside 1\.\.3600/],
    [{ PROVISIONER_TUNNEL_DRAIN_SECONDS: '-1' }, 'PROVISIONER_TUNNEL_DRAIN_SECONDS', /'-1' is not a whole number/],
  ];
  for (const [env, variable, message] of bad) refused(t, env, variable, message);
});

t.test(
  'tunnel limits: a combination the tunnel server cannot run with is refused at start-up, naming the variable',
  async (t) => {
    const { createTunnelServer } = await import('../../../provisioner/tunnel/server.ts');
    const authenticate = () => Promise.resolve(null);
    // A 15 KiB head fits a 16 KiB message byte for byte, but not once JSON escaping doubles it.
    const tooLargeHeads = {
      PROVISIONER_TUNNEL_MAX_PAYLOAD_BYTES: '16384',
      PROVISIONER_TUNNEL_MAX_HEADER_BYTES: '15360',
      PROVISIONER_TUNNEL_MAX_CHUNK_BYTES: '8192',
    };
    refused(
      t,
      tooLargeHeads,
      'PROVISIONER_TUNNEL_MAX_HEADER_BYTES',
      /does not fit PROVISIONER_TUNNEL_MAX_PAYLOAD_BYTES \(16384\).*at least 30976/,
    );
    // The largest head that fits: 2 × 8064 + 256 = 16384. Config and server agree on both sides of the line.
    const largest = loadConfig({ ...tooLargeHeads, PROVISIONER_TUNNEL_MAX_HEADER_BYTES: '8064' }, '/').tunnel;
    t.equal(largest.maxHeaderBytes, 8064, 'a head limit of 8064 bytes with a 16384-byte payload is accepted');
    const server = createTunnelServer({ ...largest, authenticate });
    t.ok(server, 'the tunnel server starts with every limit the configuration accepted');
    await server.close();
    refused(
      t,
      { ...tooLargeHeads, PROVISIONER_TUNNEL_MAX_HEADER_BYTES: '8065' },
      'PROVISIONER_TUNNEL_MAX_HEADER_BYTES',
      /does not fit/,
    );
    t.throws(
      () => createTunnelServer({ ...largest, maxHeaderBytes: 8065, authenticate }),
      { name: 'RangeError', message: /maxHeaderBytes 8065 does not fit maxPayload/ },
      'the tunnel server applies the same rule',
    );
  },
);

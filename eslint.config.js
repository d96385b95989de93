// Lint rules: typescript-eslint's recommended type-aware set plus a few rules that catch the
// mistakes that matter in a long-running service (floating promises, misused promises).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * Tests wait for events, not for time (docs/testing.md): a fixed sleep is refused in test/. The
 * only test files allowed one are named here, each with its reason; anything else waits on the
 * event (`until` from sandbox/until.ts, a promise the event resolves, a notification).
 */
export const FIXED_SLEEP_EXCEPTIONS = {
  'test/e2e/drift-watch.test.ts': 'negative checks: the watch must not queue a run for N s',
  'test/integration/db/outage.test.ts':
    "the scenario: the database gone for N s under load (the outage's length, the load's pace)",
  'test/integration/tunnel/reconnect.test.ts': 'the scenario: 60 s without a control plane (the outage is its length)',
  'test/browser/live.test.ts':
    'the scenario: log lines written at a pace while the provisioner is killed and down for 1 s',
  'test/e2e/sandbox.test.ts': "a grace period: the sandbox's exit is awaited at most 60 s before its tree is killed",
  'test/e2e/promotions.test.ts': 'the scenario: the operator killed at moments spread over a promotion',
  'test/e2e/event-reporter.test.ts': 'the scenario: writes once a second during a control-plane outage of N s',
  'test/e2e/infra.test.ts': "a stand-in ingress controller's pace (it writes load-balancer status every 0.5 s)",
  'test/e2e/drift-watch-scale.test.ts': "the subject is time: the watch's CPU at rest, measured over 20 s",
  'test/e2e/warm-pool.test.ts':
    "negative check: a full pool adds nothing over four rounds of its 2 s loop; a phase sampler's pace",
  'test/e2e/managed-cluster-tokens.test.ts':
    "the subject is time: renewals sampled over the token's lifetime, and how long a revoked token takes to be refused",
  'test/e2e/managed-cluster-bound-tokens.test.ts':
    'the subject is time: how long a token takes to be refused or renewed, in seconds',
  'test/integration/reconciler/heartbeat.test.ts':
    'the scenario: a slow database, every lease renewal held N ms before it runs',
};

/** A promise that only resolves after N ms, `sleep(N)`/`delay(N)`, or timers/promises' delays. */
const noFixedSleep = {
  meta: {
    type: 'problem',
    docs: { description: 'refuse fixed sleeps in tests: wait for the event instead' },
    messages: {
      sleep:
        'A fixed sleep in a test: wait for the event (until() from sandbox/until.ts, a promise the event resolves); a genuine exception goes in FIXED_SLEEP_EXCEPTIONS (eslint.config.js) with its reason.',
    },
    schema: [],
  },
  create(context) {
    const TIMER_PROMISES = new Set(['timers/promises', 'node:timers/promises']);
    return {
      // new Promise((r) => setTimeout(r, N)), in any form: setTimeout handed the executor's resolve.
      "CallExpression[callee.name='setTimeout'][arguments.0.type='Identifier']"(node) {
        const resolveName = node.arguments[0].name;
        const executor = context.sourceCode
          .getAncestors(node)
          .reverse()
          .find(
            (a) =>
              (a.type === 'ArrowFunctionExpression' || a.type === 'FunctionExpression') &&
              a.parent.type === 'NewExpression' &&
              a.parent.callee.type === 'Identifier' &&
              a.parent.callee.name === 'Promise',
          );
        if (executor?.params[0]?.type === 'Identifier' && executor.params[0].name === resolveName)
          context.report({ node, messageId: 'sleep' });
      },
      // await sleep(N), await delay(N)
      "CallExpression[callee.type='Identifier'][callee.name=/^(sleep|delay)$/]"(node) {
        context.report({ node, messageId: 'sleep' });
      },
      // setTimeout/scheduler from timers/promises: a delay by another name
      ImportDeclaration(node) {
        if (TIMER_PROMISES.has(node.source.value)) context.report({ node, messageId: 'sleep' });
      },
    };
  },
};

export default tseslint.config(
  { ignores: ['node_modules/', '.tools/', '.data/', '.tap/', 'coverage/', 'console/dist/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: { allowDefaultProject: ['eslint.config.js', 'test/e2e/fixtures/*.cjs'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/only-throw-error': 'error',
      // fastify plugins and handlers are async by contract even when they do not await.
      '@typescript-eslint/require-await': 'off',
      'no-console': 'off',
      eqeqeq: ['error', 'smart'],
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      // tap queues subtests itself: t.test() at the top level need not be awaited.
      '@typescript-eslint/no-floating-promises': 'off',
      // A milestone is not an assertion (docs/testing.md): assert what the step changed instead.
      'no-restricted-syntax': [
        'error',
        {
          selector:
            "CallExpression[callee.type='MemberExpression'][callee.property.name='pass'][callee.object.name='t']",
          message: 't.pass() asserts nothing; assert what the step changed (docs/testing.md).',
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts'],
    plugins: { tests: { rules: { 'no-fixed-sleep': noFixedSleep } } },
    rules: { 'tests/no-fixed-sleep': 'error' },
  },
  { files: Object.keys(FIXED_SLEEP_EXCEPTIONS), rules: { 'tests/no-fixed-sleep': 'off' } },
  { files: ['eslint.config.js', '**/*.cjs'], ...tseslint.configs.disableTypeChecked },
  {
    files: ['**/*.cjs'],
    rules: { '@typescript-eslint/no-require-imports': 'off' },
    languageOptions: {
      sourceType: 'commonjs',
      globals: { require: 'readonly', module: 'writable', URL: 'readonly', setTimeout: 'readonly' },
    },
  },
);

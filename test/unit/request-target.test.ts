/**
 * The request-target rules (provisioner/request-target-rules.ts): which targets the server refuses
 * before routing, and which extra paths the runtime proxy refuses. The same rules over real
 * sockets, on two replicas: test/integration/runtime/relay-security.test.ts.
 */
import t from 'tap';
import { proxiedPathProblem, requestTargetProblem } from '../../provisioner/request-target-rules.ts';

t.test('served: origin-form paths, dots within names, anything in the query', async (t) => {
  for (const target of [
    '/',
    '/v1/whoami',
    '/v1/runtime-versions/1.5.0/availability',
    '/v1/tenants/x/runtime/api/file.tar.gz',
    '/v1/tenants/x/runtime/api/...',
    '/v1/tenants/x/runtime/api/.hidden',
    '/v1/tenants/x/runtime/api/a..b',
    '/v1/tenants/x/runtime/api/x?next=../../etc&y=%2F&z=%2e%2e',
    '/docs/static/..%2f..%2fpackage.json',
  ])
    t.equal(requestTargetProblem(target), undefined, `${target} is served`);
});

t.test('refused before routing, each with the reason', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['http://127.0.0.1:18999/v1/tenants/x/runtime/api', /origin-form/],
    ['https://example.test/v1/whoami', /origin-form/],
    ['*', /origin-form/],
    ['127.0.0.1:80', /origin-form/],
    ['', /origin-form/],
    ['/v1/whoami#x', /"#"/],
    ['//evil.example/v1/whoami', /"\/\/"/],
    ['/v1/tenants/x/runtime/api\\..\\x', /backslash/],
    ['/v1/tenants/x/runtime/../../../latest', /dot segments/],
    ['/v1/tenants/x/runtime/./api', /dot segments/],
    ['/v1/tenants/x/runtime/api/..', /dot segments/],
    ['/v1/tenants/x/runtime/%2e%2e/x', /dot segments/],
    ['/v1/tenants/x/runtime/%2E%2E/x', /dot segments/],
    ['/v1/tenants/x/runtime/.%2e/x', /dot segments/],
    ['/v1/tenants/x/runtime/%2e./x', /dot segments/],
    ['/v1/tenants/x/runtime/%2e/x', /dot segments/],
    ['/v1/tenants/x/runtime/..?a=1', /dot segments/],
  ];
  for (const [target, reason] of cases) t.match(requestTargetProblem(target), reason, `${target}: refused (${reason})`);
});

t.test('a proxied path holds no encoded slash or backslash; its query may', async (t) => {
  t.match(proxiedPathProblem('/v1/tenants/x/runtime/api/..%2f..%2fwebhooks'), /encoded slash/, '%2f');
  t.match(proxiedPathProblem('/v1/tenants/x/runtime/api/a%2Fb'), /encoded slash/, '%2F');
  t.match(proxiedPathProblem('/v1/tenants/x/runtime/api/..%5c..%5cwebhooks'), /encoded backslash/, '%5c');
  t.equal(proxiedPathProblem('/v1/tenants/x/runtime/api/x?next=%2F%5C'), undefined, 'the query is not a path');
  t.equal(proxiedPathProblem('/v1/tenants/x/runtime/api/a%20b'), undefined, 'other escapes are fine');
});

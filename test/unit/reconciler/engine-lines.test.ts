/**
 * The engine's text as the operation log keeps it: a resource step's progress line is left out
 * (its end line follows), every other line is kept; the engine's `Outputs:` of a successful run
 * are shown, nothing withheld. Lines as the Pulumi CLI prints them (non-interactive).
 */
import t from 'tap';
import { isStepUnderWay } from '../../../provisioner/reconciler/log-writer.ts';
import { tenantVisible, WITHHELD } from '../../../provisioner/reconciler/visible-text.ts';

t.test('progress lines of a step under way are recognised; end, failure and status lines are not', async (t) => {
  for (const line of [
    ' +  pulumi:pulumi:Stack tenants-tenant-x creating (0s) ',
    ' +  kubernetes:core/v1:Namespace tenant-x creating (0s) ',
    ' ~  kubernetes:helm.sh/v3:Release argo-cd updating (12s) ',
    ' -  kubernetes:core/v1:Secret old deleting (1s)',
    ' +- kubernetes:apps/v1:Deployment agents replacing (0s) ',
    '    kubernetes:core/v1:Namespace tenant-x refreshing (0s) ',
  ])
    t.ok(isStepUnderWay(line), `under way: ${line.trim()}`);
  for (const line of [
    ' +  kubernetes:core/v1:Namespace tenant-x created (0.21s) ',
    ' +  kubernetes:core/v1:Namespace tenant-ns creating (0s) error: the server returned:',
    ' +  kubernetes:core/v1:Namespace tenant-ns **creating failed** error: 1 error occurred',
    ' +  kubernetes:apps/v1:Deployment agents creating (3s) [1/2] Waiting for app ReplicaSet to be available',
    'Updating (tenant-x):',
    '    + 3 created',
    'summary: create 3 in 43s',
  ])
    t.notOk(isStepUnderWay(line), `kept: ${line.trim()}`);
});

t.test("a successful run's outputs are shown; an upstream JSON document is still withheld", async (t) => {
  const outputs = [
    'Outputs:',
    '    argoCdUrl        : "https://api.example.test/v1/tenants/x/argo-cd/"',
    '    componentVersions: {',
    '        argoCd  : "8.0.17"',
    '    }',
    '    runtimeToken     : [secret]',
  ].join('\n');
  t.equal(tenantVisible(outputs), outputs, 'the outputs as printed (the closing brace is not an upstream response)');
  const upstream = tenantVisible('error: response:\n{\n  "kind": "Status",\n  "message": "internal token abc"\n}');
  t.notMatch(upstream, /Status|internal token/, 'the members of an upstream document are withheld');
  t.match(upstream, WITHHELD, 'and say so');
});

import t from 'tap';
import {
  MAX_VISIBLE_LINE,
  maskSecrets,
  tenantVisible,
  WITHHELD,
} from '../../../provisioner/reconciler/visible-text.ts';

// Error texts in the formats the Kubernetes provider, client-go, Go's HTTP client and Helm print
// (as they reach the operation log through the Pulumi CLI's diagnostics).

t.test("client-go's quoted upstream body is withheld; class, resource and verb stay", async (t) => {
  const text =
    'kubernetes:core/v1:Namespace (tenant-7f3a):\n    error: failed to create resource: an error on the server ("<html><head><title>502 Bad Gateway</title></head><body>upstream db01.internal: password=hunter2-hunter2</body></html>") has prevented the request from succeeding (post namespaces)';
  const out = tenantVisible(text);
  t.equal(
    out,
    `kubernetes:core/v1:Namespace (tenant-7f3a):\n    error: failed to create resource: an error on the server (${WITHHELD}) has prevented the request from succeeding (post namespaces)`,
    'the body between the quotes is replaced, the resource header, the error class and "(post namespaces)" are kept',
  );
});

t.test('an instance-metadata answer reached through a cluster address is withheld (JSON in quotes)', async (t) => {
  const text =
    'configured Kubernetes cluster is unreachable: unable to load schema information from the API server: an error on the server ("{\\"Code\\" : \\"Success\\", \\"AccessKeyId\\" : \\"ASIAEXAMPLE\\", \\"SecretAccessKey\\" : \\"wJalrXUtnFEMI/K7MDENG\\"}") has prevented the request from succeeding';
  const out = tenantVisible(text);
  t.notMatch(out, /ASIAEXAMPLE|wJalrXUtnFEMI|AccessKeyId/, 'nothing of the metadata answer is left');
  t.match(
    out,
    /^configured Kubernetes cluster is unreachable: unable to load schema information from the API server: an error on the server \(\[upstream response withheld\]\)/,
    'the class of the error is kept',
  );
});

t.test('a JSON Status body after "body:" and a bare JSON object are withheld', async (t) => {
  const a = tenantVisible(
    'helm-release (vcluster): error: unexpected response from the server, status 500, body: {"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: leader changed"}',
  );
  t.equal(
    a,
    `helm-release (vcluster): error: unexpected response from the server, status 500, body: ${WITHHELD}`,
    'everything after "body:" is withheld, the status code kept',
  );
  const b = tenantVisible(
    'error: decoding response: {"kind":"Status","details":{"name":"x","causes":[{"message":"}"}]}} (get pods)',
  );
  t.equal(
    b,
    `error: decoding response: ${WITHHELD} (get pods)`,
    'the whole object is withheld (nested braces and a brace in a string), the text after it kept',
  );
});

t.test(
  'HTML printed over several lines and a JSON document printed over several lines are withheld line by line',
  async (t) => {
    const html = tenantVisible(
      'error: the server returned:\n<html>\n<head><title>403 Forbidden</title></head>\n<body>\n<center><h1>403 Forbidden</h1></center>\n</body>\n</html>',
    );
    t.notMatch(html, /Forbidden|center|title/, 'no part of the HTML page is left');
    t.match(html, /^error: the server returned:\n/, 'the line before the page is kept');
    const json = tenantVisible(
      'error: response:\n{\n  "kind": "Status",\n  "message": "internal token abc"\n}\n    done',
    );
    t.notMatch(json, /Status|internal token/, 'no member of the document is left');
    t.match(json, /^error: response:\n/, 'the text before it is kept');
    t.match(json, /\n {4}done$/, 'the text after it is kept');
  },
);

t.test('URLs keep scheme, host and path; credentials and query strings are dropped', async (t) => {
  const out = tenantVisible(
    'kubernetes:helm.sh/v3:Release (argo-cd): error: Get "https://admin:s3cr3t-pass@10.0.0.5:6443/api/v1/namespaces?access_token=eyJhbGciOiJSUzI1NiJ9.abc&timeout=32s": dial tcp 10.0.0.5:6443: connect: connection refused',
  );
  t.equal(
    out,
    'kubernetes:helm.sh/v3:Release (argo-cd): error: Get "https://[secret]@10.0.0.5:6443/api/v1/namespaces?[query withheld]": dial tcp 10.0.0.5:6443: connect: connection refused',
    "the user info and the query are gone, Go's network error is kept",
  );
  const helm = tenantVisible(
    'Error: INSTALLATION FAILED: Internal error occurred: failed calling webhook "validate.argoproj.io": Post "https://argo-server.argo.svc:443/validate?timeout=10s&token=abcdef123456": context deadline exceeded',
  );
  t.match(
    helm,
    /Post "https:\/\/argo-server\.argo\.svc:443\/validate\?\[query withheld\]": context deadline exceeded$/,
    "Helm's webhook error keeps the call and the cause",
  );
});

t.test('credentials in headers and key=value pairs are masked', async (t) => {
  const out = tenantVisible(
    'request failed: Authorization: Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6Ik.payload.sig (basic auth: Basic dXNlcjpwYXNzd29yZA==) client_secret=abcd1234efgh',
  );
  t.notMatch(out, /eyJhbGci|dXNlcjpw|abcd1234/, 'no credential is left');
  t.match(out, /Bearer \[secret\]/, 'the scheme is kept, the token masked');
  t.match(out, /client_secret=\[secret\]/, 'the key is kept, the value masked');
});

t.test('known secrets are masked; texts without upstream bodies are unchanged', async (t) => {
  const token = 'hrt_runtime_0123456789abcdefghij';
  t.equal(
    tenantVisible(`runtime token ${token} refused`, [token]),
    'runtime token [secret] refused',
    'a known secret value is masked (the same masking as the operation log)',
  );
  t.equal(maskSecrets(`a ${token} b ${token}`, [token]), 'a [secret] b [secret]', 'every occurrence is masked');
  const plain = [
    'kubernetes:core/v1:ServiceAccount (default/agent): error: resource default/agent was not successfully created by the Kubernetes API server : serviceaccounts "agent" already exists',
    'error: the server responded with the status code 502 but did not return more information (post namespaces)',
    'kubernetes:helm.sh/v3:Release (helm-metrics-server): error: could not get server version from Kubernetes: the server has asked for the client to provide credentials',
    'error: 2 errors occurred:\n\t* resource pod-test-33ffnqif was successfully created, but the Kubernetes API server reported that it failed to fully initialize or become live: Resource operation was cancelled for "pod-test-33ffnqif"\n\t* containers with unready status: [nginx] -- [ErrImagePull] manifest for nginx:1.13-fail not found: manifest unknown',
    'summary: 3 created, 1 updated in 12s',
  ];
  for (const p of plain) t.equal(tenantVisible(p), p, `unchanged: ${p.slice(0, 60)}`);
});

t.test('the rule is idempotent', async (t) => {
  const text =
    'error: an error on the server ("<html>x</html>") has prevented the request from succeeding (get pods); body: {"a":1}; Get "https://h/p?token=abcdefgh": EOF';
  const once = tenantVisible(text);
  t.equal(tenantVisible(once), once, 'sanitising a sanitised text changes nothing');
});

t.test(
  'a line longer than MAX_VISIBLE_LINE is cut before any rule reads it, without the word the cut falls in',
  async (t) => {
    const long = `${'x '.repeat(1990)}https://user:hunter2hunter2@api.example.com/path?token=abcdefgh more`;
    const out = tenantVisible(long);
    t.ok(out.length <= MAX_VISIBLE_LINE, `the line is at most ${MAX_VISIBLE_LINE} characters (got ${out.length})`);
    t.ok(out.endsWith('…'), 'the cut is marked with …');
    t.notMatch(out, /hunter2|user:|https/, 'the URL the cut falls in is dropped whole: no half of its user info shows');
    t.equal(tenantVisible(out), out, 'a cut line stays as it is when the rule runs again');
  },
);

t.test("client-go's body over several lines is withheld up to the line where it ends", async (t) => {
  const out = tenantVisible(
    'error: an error on the server (<pre>\nupstream db01.internal refused\n</pre>) has prevented the request from succeeding (get pods)\nnext line',
  );
  t.notMatch(out, /db01|refused|pre>/, 'nothing of the body is left');
  t.match(
    out,
    /an error on the server \(\[upstream response withheld\]\) has prevented the request from succeeding \(get pods\)/,
  );
  t.match(out, /\nnext line$/, 'the line after the end of the body is kept');
});

/**
 * CPU time of `fn` (the least of three trials, each repeated `reps` times): the least is the
 * trial that other work on the machine disturbed least.
 */
function cpuMicros(fn: () => void, reps: number): number {
  let best = Infinity;
  for (let trial = 0; trial < 3; trial++) {
    const start = process.cpuUsage();
    for (let i = 0; i < reps; i++) fn();
    const used = process.cpuUsage(start);
    best = Math.min(best, used.user + used.system);
  }
  return best;
}

// Lines that made the earlier patterns rescan the rest of the line from every position (128 KB
// of `http://a` held the event loop for 7.8 s), and their like for every rule: each makes a line
// of about `n` characters.
const ADVERSARIAL: Record<string, (n: number) => string> = {
  'http://a repeated': (n) => 'http://a'.repeat(n / 8),
  'a scheme-like run (a.a.a.…)': (n) => 'a.'.repeat(n / 2),
  'Bearer and spaces': (n) => `Bearer${' '.repeat(n - 7)}!`,
  'token= repeated': (n) => 'token=ab '.repeat(n / 9),
  'unclosed client-go bodies': (n) => 'an error on the server ("'.repeat(n / 25),
  'client-go prefixes without their end': (n) => 'an error on the server (x'.repeat(n / 25),
  'unclosed JSON objects': (n) => '{"'.repeat(n / 2),
  'JSON members': (n) => '"a": "b", '.repeat(n / 10),
  '< and spaces': (n) => `<${' '.repeat(n - 2)}x`,
  'body and spaces': (n) => `body${' '.repeat(n - 5)}x`,
  'withheld parts and spaces': (n) => `${WITHHELD} `.repeat(n / 30) + 'x',
  everything: (n) =>
    'x https://u:p@h/p?q=1 Bearer abcdefgh token=abcd {"a":1} <html> an error on the server ("q") '.repeat(n / 96),
};

/** `total` characters of lines made by `line(width)`. */
function text(line: (n: number) => string, width: number, total: number): string {
  return Array.from({ length: Math.round(total / width) }, () => line(width)).join('\n');
}

/** The CPU time of one run of tenantVisible on each text, measured with the same repetitions. */
function costs(...texts: string[]): number[] {
  // Enough repetitions that the first text takes some 10 ms of CPU (timer noise is far less).
  const start = process.cpuUsage();
  tenantVisible(texts[0]!);
  const once = process.cpuUsage(start);
  const reps = Math.max(1, Math.min(1 << 16, Math.ceil(10_000 / Math.max(1, once.user + once.system))));
  return texts.map((s) => cpuMicros(() => tenantVisible(s), reps) / reps);
}

t.test(
  'every rule is linear in the length of a line: 128 KB in 4 KB lines costs about what it costs in 1 KB lines',
  async (t) => {
    // The same 128 KB: a linear rule costs the same in long lines as in short ones; a quadratic one
    // costs 4× as much in lines 4× as long. Lines stay under MAX_VISIBLE_LINE (nothing is cut).
    const BOUND = 2.5;
    for (const [name, line] of Object.entries(ADVERSARIAL)) {
      const [short, long] = costs(text(line, 975, 128 * 1024), text(line, 3900, 128 * 1024));
      t.ok(
        long! / short! < BOUND,
        `${name}: 128 KB in 3,900-character lines costs less than ${BOUND}× its cost in 975-character lines (${(long! / short!).toFixed(1)}×; ${Math.round(long!)} µs)`,
      );
    }
  },
);

t.test('the whole text is linear: 4× the lines cost about 4× the work, not 16×', async (t) => {
  const BOUND = 8;
  for (const [name, line] of Object.entries(ADVERSARIAL)) {
    const [small, large] = costs(text(line, 975, 32 * 1024), text(line, 975, 128 * 1024));
    t.ok(
      large! / small! < BOUND,
      `${name}: 128 KB costs less than ${BOUND}× the CPU time of 32 KB (${(large! / small!).toFixed(1)}×; ${Math.round(large!)} µs)`,
    );
  }
});

t.test('128 KB of http://a on one line comes back as one cut line', async (t) => {
  const out = tenantVisible('http://a'.repeat(16 * 1024));
  t.ok(out.length <= MAX_VISIBLE_LINE, `at most ${MAX_VISIBLE_LINE} characters (got ${out.length})`);
  t.notMatch(out, /\n/, 'one line');
});

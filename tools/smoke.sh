#!/usr/bin/env bash
# Smoke test of the e2e toolchain (scripts/toolchain.sh), and the reference procedure the
# e2e harness mirrors. Everything runs on loopback, with random free ports, in a temp folder:
#   1. certificates with openssl: a CA, the apiserver's serving cert, an admin client cert
#      (O=system:masters), a service-account key pair
#   2. etcd, kube-apiserver (waits for /readyz), kube-controller-manager, kube-scheduler
#   3. kwok with the stages from <toolchain>/share/kwok-stages.yaml; one fake node is created
#      and must become Ready; a 2-replica Deployment must become Available
#   4. `pulumi up` / `pulumi destroy` of a Node.js program (through pulumi-language-nodejs) that
#      creates a ConfigMap with the Kubernetes provider plugin built by
#      scripts/kubernetes-provider.sh (its schema must name the version the npm SDK pins, and the
#      engine must not warn about a version mismatch), file:// backend
#   5. the same through the Automation API with an inline program (no language host: this is
#      how the provisioner drives Pulumi)
#
#   bash tools/smoke.sh [BIN [PROVIDER_BIN]]
#       BIN defaults to $(bash scripts/toolchain.sh | tail -1), PROVIDER_BIN (the folder holding
#       pulumi-resource-kubernetes) to $(bash scripts/kubernetes-provider.sh | tail -1)
#   SMOKE_KEEP=1 keeps the temp folder and leaves nothing running either way.
# Exits non-zero on the first failing step; the last line is "smoke: N passed, N failed".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$(bash "$ROOT/scripts/toolchain.sh" | tail -1)}"
PROVIDER_BIN="${2:-$(bash "$ROOT/scripts/kubernetes-provider.sh" | tail -1)}"
SHARE="$(dirname "$BIN")/share"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/toolchain-smoke.XXXXXX")"
PASSED=0
FAILED=0
PIDS=()
NAMES=()
T0=$(date +%s%N)

log() { printf '[smoke %6.1fs] %s\n' "$(( ($(date +%s%N) - T0) / 1000000 ))e-3" "$*" >&2; }
pass() { PASSED=$((PASSED + 1)); log "ok: $*"; }
die() {
  FAILED=$((FAILED + 1)); log "FAILED: $*"
  exit 1
}
cleanup() {
  local rc=$?
  # SIGTERM in reverse start order; whatever has not exited after 10 s gets SIGKILL
  # (kube-apiserver's graceful shutdown otherwise waits about a minute for its watches).
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill "${PIDS[$i]}" 2>/dev/null || true; done
  local deadline=$(( $(date +%s) + 10 )) p alive
  while :; do
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      for i in "${!PIDS[@]}"; do
        kill -0 "${PIDS[$i]}" 2>/dev/null || continue
        log "${NAMES[$i]} still running 10 s after SIGTERM: SIGKILL"; kill -9 "${PIDS[$i]}" 2>/dev/null || true
      done
      break
    fi
    sleep 0.2
  done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$rc" != 0 ]; then
    log "logs in $WORK/*.log (last lines):"
    for f in "$WORK"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 8 "$f"; } >&2; done
  fi
  echo "smoke: $PASSED passed, $FAILED failed"
  if [ -z "${SMOKE_KEEP:-}" ] && [ "$rc" = 0 ]; then rm -rf "$WORK"; else log "kept $WORK"; fi
}
trap cleanup EXIT

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok pulumi; do
  [ -x "$BIN/$b" ] || die "$BIN/$b is missing (see $(dirname "$BIN")/FAILED)"
done
[ -x "$PROVIDER_BIN/pulumi-resource-kubernetes" ] ||
  die "$PROVIDER_BIN/pulumi-resource-kubernetes is missing (scripts/kubernetes-provider.sh)"

# Node.js >= 22 for the Pulumi programs: the project's .tools/node, else PATH, else /tmp/nodetest.
NODE_DIR=""
for d in "$ROOT/.tools/node/node_modules/.bin" /tmp/nodetest/node_modules/.bin; do
  if [ -x "$d/node" ]; then NODE_DIR="$d"; break; fi
done
if [ -z "$NODE_DIR" ] && command -v node >/dev/null; then NODE_DIR="$(dirname "$(command -v node)")"; fi
[ -n "$NODE_DIR" ] || die "no node found"
export PATH="$BIN:$PROVIDER_BIN:$NODE_DIR:$PATH"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(free_port); ETCD_PEER=$(free_port); API_PORT=$(free_port)
KCM_PORT=$(free_port); SCHED_PORT=$(free_port); KWOK_PORT=$(free_port)

# ---- 1. certificates -----------------------------------------------------------------
C="$WORK/pki"; mkdir -p "$C"
(
  cd "$C"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=smoke-ca" \
    -keyout ca.key -out ca.crt
  cat > apiserver.ext <<EOF
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EOF
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile apiserver.ext -out apiserver.crt
  echo 'extendedKeyUsage=clientAuth' > client.ext
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=smoke-admin" -keyout admin.key -out admin.csr
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile client.ext -out admin.crt
  openssl genrsa -out sa.key 2048
  openssl rsa -in sa.key -pubout -out sa.pub
) > "$WORK/pki.log" 2>&1 || die "openssl"
KUBECONFIG="$WORK/admin.kubeconfig"
cat > "$KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: smoke
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$C/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$C/admin.crt", client-key: "$C/admin.key"}
contexts:
- name: smoke
  context: {cluster: smoke, user: admin}
current-context: smoke
EOF
export KUBECONFIG
pass "certificates and kubeconfig"

# ---- 2. control plane ----------------------------------------------------------------
start() { local name="$1"; shift; "$@" > "$WORK/$name.log" 2>&1 & PIDS+=($!); NAMES+=("$name"); }
wait_for() { # description timeout-seconds command...
  local what="$1" limit="$2"; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.5
  done
}

start etcd etcd --name smoke --data-dir "$WORK/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "smoke=http://127.0.0.1:$ETCD_PEER" --log-level warn
wait_for "etcd /health" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
pass "etcd $(etcd --version | head -1 | awk '{print $3}') on 127.0.0.1:$ETCD_PORT"

start kube-apiserver kube-apiserver \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" --etcd-prefix /smoke \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --cert-dir "$WORK/apiserver" --tls-cert-file "$C/apiserver.crt" --tls-private-key-file "$C/apiserver.key" \
  --client-ca-file "$C/ca.crt" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$C/sa.pub" --service-account-signing-key-file "$C/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC --allow-privileged=true
api_ready() { curl -sf --cacert "$C/ca.crt" --cert "$C/admin.crt" --key "$C/admin.key" \
  "https://127.0.0.1:$API_PORT/readyz"; }
wait_for "kube-apiserver /readyz" 90 api_ready
pass "kube-apiserver $(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])') ready on 127.0.0.1:$API_PORT"

start kube-controller-manager kube-controller-manager --kubeconfig "$KUBECONFIG" \
  --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
  --service-account-private-key-file "$C/sa.key" --root-ca-file "$C/ca.crt" \
  --use-service-account-credentials=true --service-cluster-ip-range 10.96.0.0/16
start kube-scheduler kube-scheduler --kubeconfig "$KUBECONFIG" \
  --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false
wait_for "kube-controller-manager /healthz" 60 curl -skf "https://127.0.0.1:$KCM_PORT/healthz"
wait_for "kube-scheduler /healthz" 60 curl -skf "https://127.0.0.1:$SCHED_PORT/healthz"
wait_for "the default service account" 60 kubectl get serviceaccount default -n default
pass "kube-controller-manager and kube-scheduler healthy"

# ---- 3. KWOK -------------------------------------------------------------------------
[ -s "$SHARE/kwok-stages.yaml" ] || die "$SHARE/kwok-stages.yaml is missing"
start kwok kwok --kubeconfig "$KUBECONFIG" --config "$SHARE/kwok-stages.yaml" \
  --manage-all-nodes=true --server-address "127.0.0.1:$KWOK_PORT" --cidr 10.244.0.0/16 --node-ip 127.0.0.1
kubectl apply -f - > "$WORK/kubectl.log" 2>&1 <<'EOF' || die "creating the fake node"
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {type: kwok, kubernetes.io/hostname: kwok-node-0, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
EOF
wait_for "node kwok-node-0 Ready" 60 kubectl wait --for=condition=Ready node/kwok-node-0 --timeout=2s
pass "kwok: fake node kwok-node-0 is Ready"
kubectl create deployment smoke --image=registry.invalid/smoke:1 --replicas=2 >> "$WORK/kubectl.log" 2>&1 \
  || die "creating a deployment"
wait_for "deployment smoke Available" 90 kubectl wait --for=condition=Available deployment/smoke --timeout=2s
pass "deployment smoke Available ($(kubectl get pods -l app=smoke --no-headers | grep -c Running) pods Running on kwok)"

# ---- 4. Pulumi CLI with a Node.js program ---------------------------------------------
export PULUMI_HOME="$WORK/pulumi-home"
export PULUMI_BACKEND_URL="file://$WORK/pulumi-state"
export PULUMI_CONFIG_PASSPHRASE=smoke
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
mkdir -p "$PULUMI_HOME" "$WORK/pulumi-state" "$WORK/prog"
log "pulumi $(pulumi version)"
# The plugin's own schema names its version; the npm SDK the programs use must pin the same one.
SDK_VERSION="$(node -p 'require(process.argv[1]).version' "$ROOT/node_modules/@pulumi/kubernetes/package.json")"
PLUGIN_VERSION="$(pulumi package get-schema "$PROVIDER_BIN/pulumi-resource-kubernetes" 2> "$WORK/get-schema.log" |
  node -e 'let s="";process.stdin.on("data",(d)=>(s+=d)).on("end",()=>{const j=JSON.parse(s);console.log(j.name+" "+j.version)})')" ||
  die "pulumi package get-schema $PROVIDER_BIN/pulumi-resource-kubernetes (see $WORK/get-schema.log)"
[ "$PLUGIN_VERSION" = "kubernetes $SDK_VERSION" ] ||
  die "the provider plugin's schema says '$PLUGIN_VERSION', the npm SDK @pulumi/kubernetes is $SDK_VERSION"
pass "provider plugin $PROVIDER_BIN/pulumi-resource-kubernetes: schema $PLUGIN_VERSION, the npm SDK's version"
ln -s "$ROOT/node_modules" "$WORK/prog/node_modules"
cat > "$WORK/prog/Pulumi.yaml" <<'EOF'
name: toolchain-smoke
runtime: nodejs
EOF
echo '{"name": "toolchain-smoke", "private": true, "main": "index.js"}' > "$WORK/prog/package.json"
cat > "$WORK/prog/index.js" <<'EOF'
const pulumi = require("@pulumi/pulumi");
const k8s = require("@pulumi/kubernetes");
const config = new pulumi.Config();
const provider = new k8s.Provider("root", { kubeconfig: config.require("kubeconfig") });
const cm = new k8s.core.v1.ConfigMap("smoke", {
  metadata: { name: "smoke-cli", namespace: "default" },
  data: { hello: "world" },
}, { provider });
exports.name = cm.metadata.name;
EOF
(
  cd "$WORK/prog"
  pulumi stack init smoke --non-interactive
  pulumi config set kubeconfig "$KUBECONFIG"
  pulumi up --yes --skip-preview --non-interactive
) > "$WORK/pulumi-cli.log" 2>&1 || die "pulumi up (CLI program, see $WORK/pulumi-cli.log)"
[ "$(kubectl get configmap smoke-cli -o jsonpath='{.data.hello}')" = world ] || die "ConfigMap smoke-cli not found"
grep -q 'downloading\|Downloading' "$WORK/pulumi-cli.log" && die "pulumi tried to download a plugin"
grep -q 'expected to have version' "$WORK/pulumi-cli.log" &&
  die "the engine warned that the plugin's version is not the SDK's: $(grep -m1 'expected to have version' "$WORK/pulumi-cli.log")"
(cd "$WORK/prog" && pulumi destroy --yes --skip-preview --non-interactive) >> "$WORK/pulumi-cli.log" 2>&1 \
  || die "pulumi destroy (CLI program)"
kubectl get configmap smoke-cli >/dev/null 2>&1 && die "ConfigMap smoke-cli still exists after destroy"
pass "pulumi up/destroy of a Node.js program created and removed ConfigMap smoke-cli"

# ---- 5. Automation API, inline program (the provisioner's way) ------------------------
cat > "$WORK/prog/inline.mjs" <<'EOF'
import { LocalWorkspace } from "@pulumi/pulumi/automation/index.js";
import * as k8s from "@pulumi/kubernetes";
const kubeconfig = process.env.KUBECONFIG;
const program = async () => {
  const provider = new k8s.Provider("root", { kubeconfig });
  const cm = new k8s.core.v1.ConfigMap("smoke", {
    metadata: { name: "smoke-inline", namespace: "default" }, data: { hello: "inline" },
  }, { provider });
  return { name: cm.metadata.name };
};
const stack = await LocalWorkspace.createOrSelectStack(
  { projectName: "toolchain-smoke-inline", stackName: "smoke", program },
  { workDir: process.argv[2] });
const up = await stack.up({ onOutput: (s) => process.stdout.write(s) });
console.log("up:", up.summary.result, JSON.stringify(up.outputs.name.value));
const refresh = await stack.refresh({ onOutput: (s) => process.stdout.write(s) });
console.log("refresh:", refresh.summary.result);
if (process.argv[3] === "destroy") {
  const d = await stack.destroy({ onOutput: (s) => process.stdout.write(s) });
  console.log("destroy:", d.summary.result);
}
EOF
mkdir -p "$WORK/inline-ws"
(cd "$WORK/prog" && node inline.mjs "$WORK/inline-ws") > "$WORK/pulumi-inline.log" 2>&1 \
  || die "Automation API inline up/refresh (see $WORK/pulumi-inline.log)"
[ "$(kubectl get configmap smoke-inline -o jsonpath='{.data.hello}')" = inline ] || die "ConfigMap smoke-inline not found"
(cd "$WORK/prog" && node inline.mjs "$WORK/inline-ws" destroy) >> "$WORK/pulumi-inline.log" 2>&1 \
  || die "Automation API inline destroy"
kubectl get configmap smoke-inline >/dev/null 2>&1 && die "ConfigMap smoke-inline still exists after destroy"
grep -q 'downloading\|Downloading' "$WORK/pulumi-inline.log" && die "pulumi tried to download a plugin"
pass "Automation API inline up/refresh/destroy created and removed ConfigMap smoke-inline"

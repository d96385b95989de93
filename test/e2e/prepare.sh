# Sourced by scripts/test.sh before the end-to-end tier (do not execute it; do not `set -e` here).
# Builds or reuses the toolchain (scripts/toolchain.sh: Kubernetes control plane, etcd, KWOK,
# Pulumi CLI, Node.js language host) and exports its bin folder as HRT_TOOLCHAIN_BIN. Returns
# non-zero with a printed reason when the tier cannot run (no Go, a required binary could not be
# built); scripts/test.sh then skips the tier, or fails it when CI=true. See docs/e2e.md.
#
# The Kubernetes provider plugin: the real pulumi-resource-kubernetes 4.25.0, built from its Go
# module by scripts/kubernetes-provider.sh (its own cache; a cold build takes about 350 CPU-s on its own,
# docs/toolchain.md). Exported as HRT_KUBERNETES_PROVIDER. A failed build stops the tier (a
# failure with CI=true), with the build's reason.
#
# The real Argo CRDs (Application, AppProject, Rollout, Workflow) from the Argo projects' Go
# modules (scripts/argo-crds.sh, cached outside the repository): exported as HRT_ARGO_CRDS_DIR.
# When they cannot be fetched the tier does not run (and fails with CI=true), with the reason.
#
# The chart mirror: the real upstream vcluster and Argo charts at every version the catalog pins
# (`<chart>-<version>.tgz`), from HRT_CHART_MIRROR or `shared/charts` beside the repository's
# folder, with the vcluster charts it lacks packaged from their Go modules (scripts/chart-mirror.sh).
# The assembled folder is exported as HRT_CHART_MIRROR; when the mirror is missing or cannot be
# assembled the tier does not run (fails with CI=true).
#
# Argo CD (application controller + repo-server, one multicall binary) and redis-standin, built
# from the argo-cd v3 Go module by scripts/argocd.sh (its own cache; a cold build adds about
# 5-8 minutes of 2 cores, docs/toolchain.md): exported as HRT_ARGOCD_BIN. A failed build stops the
# tier (a failure with CI=true), with the build's reason.
#
# Argo Workflows' workflow-controller v3.7.2, built from its Go module by scripts/argo-workflows.sh
# (its own cache; a cold build takes about 300 CPU-s, docs/toolchain.md "Argo Workflows"): exported
# as HRT_ARGO_WORKFLOWS_BIN. A failed build stops the tier (a failure with CI=true), with the reason.
#
# Argo Rollouts' rollouts-controller v1.8.3, built from its Go module by scripts/argo-rollouts.sh
# (its own cache; docs/toolchain.md "Argo Rollouts"): exported as HRT_ARGO_ROLLOUTS_BIN. Only
# argo-rollouts.test.ts uses it: a failed build is reported and skips that file (fails it with
# CI=true), the rest of the tier runs.
#
# vcluster (one binary per version the catalog pins) and kine, built from their Go modules by
# scripts/vcluster.sh (its own cache; a cold build takes about 1,450 CPU-s, docs/toolchain.md): exported as HRT_VCLUSTER_BIN. Every tenant's vcluster
# in this tier is the real one (sandbox/vcluster-pods.ts), which needs root (network and mount
# namespaces). A failed build, or a machine where it cannot run, stops the tier (a failure with
# CI=true), with the reason.
#
# HRT_PREPARE_FOR=sandbox (scripts/sandbox.sh): what a local root cluster with the provisioner needs
# (toolchain, chart mirror, provider plugin) and, as root unless SANDBOX_RUNTIME=0, what runs its
# tenant's runtime (Argo CD, vcluster, nftables and redis-server); the Argo CRDs are skipped.
# HRT_E2E_DEFERRED_BUILDS (scripts/test.sh, with background builds): the builds among
# argo-workflows, argo-rollouts and gitea left out here; the files that use them wait for their
# background build themselves (test/e2e/harness/background-build.ts), so the late phase need not.
# HRT_PREPARE_FOR=early (scripts/test.sh, the tier's early phase): only the chart mirror, the
# toolchain and the Argo CRDs; Argo CD, Argo Workflows, Argo Rollouts, vcluster and the provider plugin are left to the full
# preparation that follows (on a cold machine they are still compiling in the background).

# The hosted runtime's pods (sandbox/runtime-pods.ts) route Service traffic with nftables and run
# Redis as Debian's redis-server: installed with apt-get (root) when missing. Fails when nft is
# still missing after that.
_hrt_runtime_pod_packages() {
  command -v nft >/dev/null 2>&1 && command -v redis-server >/dev/null 2>&1 && return 0
  echo "e2e: installing Debian's nftables and redis-server (apt-get; the runtime pods need them, docs/e2e.md)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables redis-server; } >/dev/null 2>&1
  command -v nft >/dev/null 2>&1
}

# _hrt_e2e_deferred STEP WHAT: true when scripts/test.sh left STEP's build to the late phase's files
# that use it (HRT_E2E_DEFERRED_BUILDS): they wait for its background build themselves
# (test/e2e/harness/background-build.ts), so the other late files need not.
_hrt_e2e_deferred() {
  [ -n "${HRT_E2E_BUILDS_DIR:-}" ] && [[ " ${HRT_E2E_DEFERRED_BUILDS:-} " == *" $1 "* ]] || return 1
  echo "e2e: $2: left to the files that use it, which wait for its background build (scripts/test.sh)"
}
_hrt_e2e_prepare() {
  local root out rc bin missing b provider mirror
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  mirror="${HRT_CHART_MIRROR:-$(cd "$root/.." && pwd)/shared/charts}"
  if ! ls "$mirror"/vcluster-*.tgz "$mirror"/argo-cd-*.tgz >/dev/null 2>&1; then
    echo "e2e: skipped: no chart mirror at $mirror (the real vcluster and Argo charts, <chart>-<version>.tgz; set HRT_CHART_MIRROR; docs/e2e.md)"
    return 1
  fi
  # With the vcluster charts the shared mirror lacks, packaged from their Go modules (scripts/chart-mirror.sh).
  out="$(HRT_CHART_MIRROR="$mirror" bash "$root/scripts/chart-mirror.sh")"
  rc=$?
  if [ "$rc" != 0 ]; then
    echo "e2e: skipped: the chart mirror could not be assembled (scripts/chart-mirror.sh exited with $rc; its reason is printed above)"
    return 1
  fi
  export HRT_CHART_MIRROR="$(printf '%s\n' "$out" | tail -n 1)"
  echo "e2e: chart mirror $HRT_CHART_MIRROR ($(sed -n 's/^packaged from Go modules: /vcluster charts packaged from their modules: /p' "$HRT_CHART_MIRROR/.assembled" 2>/dev/null))"
  if ! command -v go >/dev/null 2>&1; then
    echo "e2e: skipped: Go is not installed; the end-to-end toolchain is built from Go modules (docs/toolchain.md, docs/e2e.md)"
    return 1
  fi
  if ! command -v openssl >/dev/null 2>&1; then
    echo "e2e: skipped: openssl is not installed; the harness makes the control planes' certificates with it"
    return 1
  fi
  echo "e2e: building or reusing the toolchain (scripts/toolchain.sh; a cold build takes long)"
  # Only the binaries the tier uses (kwokctl and etcdctl are for tools/smoke.sh and people; not
  # building them saves a cold run a few minutes). pulumi-language-nodejs runs infra's program
  # (infra.test.ts: `pulumi up` of a program on disk, not an inline one); kubectl applies the hybrid
  # runtimes' bundles (hybrid-upgrader.test.ts, hybrid-existing-argo.test.ts).
  out="$(bash "$root/scripts/toolchain.sh" --only etcd --only kube-apiserver --only kubectl --only kube-controller-manager \
    --only kube-scheduler --only kwok --only pulumi --only pulumi-language-nodejs)"
  rc=$?
  bin="$(printf '%s\n' "$out" | tail -n 1)"
  if [ -z "$bin" ] || [ ! -d "$bin" ]; then
    echo "e2e: skipped: scripts/toolchain.sh exited with $rc and printed no bin folder"
    return 1
  fi
  missing=()
  for b in etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok pulumi pulumi-language-nodejs; do
    [ -x "$bin/$b" ] || missing+=("$b")
  done
  [ -s "$bin/../share/kwok-stages.yaml" ] || missing+=("share/kwok-stages.yaml")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "e2e: skipped: the toolchain lacks ${missing[*]} (scripts/toolchain.sh exited with $rc; see $(dirname "$bin")/FAILED)"
    [ -f "$bin/../FAILED" ] && sed 's/^/e2e:   /' "$bin/../FAILED"
    return 1
  fi
  if [ "$rc" != 0 ]; then
    echo "e2e: scripts/toolchain.sh exited with $rc, but every binary the tier needs is present; continuing"
  fi
  export HRT_TOOLCHAIN_BIN="$bin"
  echo "e2e: toolchain $HRT_TOOLCHAIN_BIN"
  if [ "${HRT_PREPARE_FOR:-}" != sandbox ]; then
    out="$(bash "$root/scripts/argo-crds.sh")"
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "e2e: skipped: the Argo CRDs could not be fetched from the Argo projects' Go modules (scripts/argo-crds.sh exited with $rc; its reason is printed above)"
      return 1
    fi
    export HRT_ARGO_CRDS_DIR="$(printf '%s\n' "$out" | tail -n 1)"
    echo "e2e: Argo CRDs $HRT_ARGO_CRDS_DIR"
    # The tier's early phase (scripts/test.sh) needs only the toolchain, the Argo CRDs and, for
    # runtime-pods.test.ts, the runtime pods' packages (that file names what is missing itself).
    if [ "${HRT_PREPARE_FOR:-}" = early ]; then
      [ "$(id -u)" != 0 ] || _hrt_runtime_pod_packages || true
      return 0
    fi
  fi
  # The sandbox runs its tenant's runtime too (real vclusters and the runtime pods, root only)
  # unless SANDBOX_RUNTIME=0; then, and for non-root users, it emulates the vcluster (sandbox/main.ts).
  if [ "${HRT_PREPARE_FOR:-}" != sandbox ] || { [ "${SANDBOX_RUNTIME:-1}" != 0 ] && [ "$(id -u)" = 0 ]; }; then
    echo "e2e: building or reusing Argo CD (scripts/argocd.sh; a cold build takes several minutes)"
    out="$(bash "$root/scripts/argocd.sh")"
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "e2e: skipped: Argo CD did not build from its Go module (scripts/argocd.sh exited with $rc; its reason is printed above)"
      return 1
    fi
    export HRT_ARGOCD_BIN="$(printf '%s\n' "$out" | tail -n 1)"
    echo "e2e: Argo CD $HRT_ARGOCD_BIN/argocd ($(command -v redis-server >/dev/null 2>&1 && echo 'Redis: redis-server from PATH' || echo 'Redis: no redis-server on PATH, the in-memory redis-standin'))"
    if [ "$(id -u)" != 0 ]; then
      echo "e2e: skipped: the tenants' vclusters are real (sandbox/vcluster-pods.ts) and each runs in network and mount namespaces of its own, which needs root (docs/e2e.md)"
      return 1
    fi
    for b in ip unshare setpriv; do
      if ! command -v "$b" >/dev/null 2>&1; then
        echo "e2e: skipped: \`$b\` is not installed (iproute2, util-linux); the real vclusters need it (docs/e2e.md)"
        return 1
      fi
    done
    echo "e2e: building or reusing vcluster and kine (scripts/vcluster.sh; a cold build takes several minutes)"
    out="$(bash "$root/scripts/vcluster.sh")"
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "e2e: skipped: vcluster did not build from its Go module (scripts/vcluster.sh exited with $rc; its reason is printed above)"
      return 1
    fi
    export HRT_VCLUSTER_BIN="$(printf '%s\n' "$out" | tail -n 1)"
    echo "e2e: vcluster $HRT_VCLUSTER_BIN ($(cut -f2 "$HRT_VCLUSTER_BIN/versions.txt" | paste -sd, - | sed 's/,/, /g'))"
    if ! _hrt_runtime_pod_packages; then
      echo "e2e: skipped: nftables (nft) could not be installed with apt-get; the runtime pods route Service traffic with it (docs/e2e.md)"
      return 1
    fi
  fi
  if [ "${HRT_PREPARE_FOR:-}" != sandbox ] && _hrt_e2e_deferred argo-workflows "the Argo Workflows controller"; then :
  elif [ "${HRT_PREPARE_FOR:-}" != sandbox ]; then
    echo "e2e: building or reusing the Argo Workflows controller (scripts/argo-workflows.sh; a cold build takes several minutes)"
    out="$(bash "$root/scripts/argo-workflows.sh")"
    rc=$?
    if [ "$rc" != 0 ]; then
      echo "e2e: skipped: the Argo Workflows controller did not build from its Go module (scripts/argo-workflows.sh exited with $rc; its reason is printed above)"
      return 1
    fi
    export HRT_ARGO_WORKFLOWS_BIN="$(printf '%s\n' "$out" | tail -n 1)"
    echo "e2e: Argo Workflows $HRT_ARGO_WORKFLOWS_BIN/workflow-controller"
  fi
  if [ "${HRT_PREPARE_FOR:-}" != sandbox ] && _hrt_e2e_deferred argo-rollouts "the Argo Rollouts controller"; then :
  elif [ "${HRT_PREPARE_FOR:-}" != sandbox ]; then
    # Only argo-rollouts.test.ts uses it: a failed build skips that file (fails it with CI=true),
    # not the tier.
    echo "e2e: building or reusing the Argo Rollouts controller (scripts/argo-rollouts.sh; a cold build takes several minutes)"
    out="$(bash "$root/scripts/argo-rollouts.sh")"
    rc=$?
    if [ "$rc" = 0 ]; then
      export HRT_ARGO_ROLLOUTS_BIN="$(printf '%s\n' "$out" | tail -n 1)"
      echo "e2e: Argo Rollouts $HRT_ARGO_ROLLOUTS_BIN/rollouts-controller"
    else
      unset HRT_ARGO_ROLLOUTS_BIN
      echo "e2e: argo-rollouts.test.ts will be skipped: the Argo Rollouts controller did not build from its Go module (scripts/argo-rollouts.sh exited with $rc; its reason is printed above)"
    fi
  fi
  if [ "${HRT_PREPARE_FOR:-}" != sandbox ] && _hrt_e2e_deferred gitea Gitea; then :
  elif [ "${HRT_PREPARE_FOR:-}" != sandbox ]; then
    # Gitea, the real Git provider of test/e2e/gitea-pull-requests.test.ts: a failed build skips
    # only that test (with this reason), never the tier.
    echo "e2e: building or reusing Gitea (scripts/gitea.sh; a cold build takes several minutes)"
    out="$(bash "$root/scripts/gitea.sh")"
    rc=$?
    if [ "$rc" = 0 ] && [ -x "$(printf '%s\n' "$out" | tail -n 1)/gitea" ]; then
      export HRT_GITEA_BIN="$(printf '%s\n' "$out" | tail -n 1)"
      echo "e2e: Gitea $HRT_GITEA_BIN/gitea"
    else
      export HRT_GITEA_SKIP="Gitea did not build from its Go module (scripts/gitea.sh exited with $rc; its reason is printed above)"
      echo "e2e: the Gitea pull-request test skips: $HRT_GITEA_SKIP"
    fi
  fi
  echo "e2e: building or reusing the Kubernetes provider plugin (scripts/kubernetes-provider.sh; a cold build takes long)"
  out="$(bash "$root/scripts/kubernetes-provider.sh")"
  rc=$?
  provider="$(printf '%s\n' "$out" | tail -n 1)/pulumi-resource-kubernetes"
  if [ "$rc" != 0 ] || [ ! -x "$provider" ]; then
    echo "e2e: skipped: the Kubernetes provider plugin did not build from its Go module (scripts/kubernetes-provider.sh exited with $rc; its reason is printed above)"
    return 1
  fi
  export HRT_KUBERNETES_PROVIDER="$provider"
  echo "e2e: Kubernetes provider plugin $HRT_KUBERNETES_PROVIDER"
  return 0
}

if _hrt_e2e_prepare; then _hrt_e2e_rc=0; else _hrt_e2e_rc=$?; fi
unset -f _hrt_e2e_prepare _hrt_e2e_deferred
return "$_hrt_e2e_rc"

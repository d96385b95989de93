# Sourced by scripts/test.sh before the end-to-end tier (do not execute it; do not `set -e` here).
# Builds or reuses the toolchain (scripts/toolchain.sh: Kubernetes control plane, etcd, KWOK,
# Pulumi CLI, Node.js language host) and exports its bin folder as HRT_TOOLCHAIN_BIN. Returns
# non-zero with a printed reason when the tier cannot run (no Go, a required binary could not be
# built); scripts/test.sh then skips the tier, or fails it when CI=true. See docs/e2e.md.
#
# The Kubernetes provider plugin is optional: HRT_KUBERNETES_PROVIDER is exported when one is
# available (PULUMI_KUBERNETES_PROVIDER=/path/to/pulumi-resource-kubernetes, or a
# pulumi-resource-kubernetes in the toolchain's bin folder). Without it the files that need it
# report themselves skipped with the reason; the rest of the tier runs.

_hrt_e2e_prepare() {
  local root out rc bin missing b provider
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  if ! command -v go >/dev/null 2>&1; then
    echo "e2e: skipped: Go is not installed; the end-to-end toolchain is built from Go modules (docs/toolchain.md, docs/e2e.md)"
    return 1
  fi
  if ! command -v openssl >/dev/null 2>&1; then
    echo "e2e: skipped: openssl is not installed; the harness makes the control planes' certificates with it"
    return 1
  fi
  echo "e2e: building or reusing the toolchain (scripts/toolchain.sh; a cold build takes long)"
  out="$(bash "$root/scripts/toolchain.sh")"
  rc=$?
  bin="$(printf '%s\n' "$out" | tail -n 1)"
  if [ -z "$bin" ] || [ ! -d "$bin" ]; then
    echo "e2e: skipped: scripts/toolchain.sh exited with $rc and printed no bin folder"
    return 1
  fi
  missing=()
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok pulumi; do
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
  provider="${PULUMI_KUBERNETES_PROVIDER:-}"
  if [ -z "$provider" ] && [ -x "$bin/pulumi-resource-kubernetes" ]; then provider="$bin/pulumi-resource-kubernetes"; fi
  if [ -n "$provider" ] && [ -x "$provider" ]; then
    export HRT_KUBERNETES_PROVIDER="$provider"
    echo "e2e: Kubernetes provider plugin $HRT_KUBERNETES_PROVIDER"
  else
    unset HRT_KUBERNETES_PROVIDER
    echo "e2e: no Kubernetes provider plugin (pulumi-resource-kubernetes is not built by scripts/toolchain.sh: docs/toolchain.md);" \
      "the tests that need it are reported as skipped; set PULUMI_KUBERNETES_PROVIDER=/path/to/pulumi-resource-kubernetes to run them"
  fi
  return 0
}

if _hrt_e2e_prepare; then _hrt_e2e_rc=0; else _hrt_e2e_rc=$?; fi
unset -f _hrt_e2e_prepare
return "$_hrt_e2e_rc"

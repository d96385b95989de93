#!/usr/bin/env bash
# Builds the chart tools with `go build` from pinned Go modules, into a cache folder outside the
# repository, and prints that folder's bin directory as the LAST line of stdout:
#
#     CHART_TOOLS_BIN=$(bash scripts/chart-tools.sh | tail -1)   # $CHART_TOOLS_BIN/helm, …/pod-security
#
#  - helm: helm.sh/helm/v3 at the version the Kubernetes provider embeds (the Helm that installs
#    the runtime's releases: github.com/pulumi/pulumi-kubernetes/provider/v4 v4.25.0 requires
#    helm.sh/helm/v3 v3.18.6), module tools/chart-tools/helm;
#  - pod-security: tools/chart-tools/pod-security/main.go, the upstream Pod Security evaluator
#    (k8s.io/pod-security-admission/policy, the Kubernetes version the e2e toolchain builds) over
#    objects read from stdin.
#
# The folder is ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/chart-tools/<hash>/bin, where <hash>
# covers the versions below, the Go version and tools/chart-tools' go.mod, go.sum and *.go files:
# its own cache key, apart from scripts/toolchain.sh's (which leaves tools/chart-tools out), so
# changing a chart tool does not rebuild the Kubernetes toolchain. After a complete build
# <cache>/current links to it (the provisioner CLI finds helm there). A complete folder is reused
# (well under a second). Progress and errors go to stderr. Exit codes: 0 built or reused; 1 a
# build failed (its log's last lines are printed); 3 no Go. Environment: CHART_TOOLS_CACHE
# overrides the cache root; TOOLCHAIN_NICE (default 15). Measured cold build: docs/toolchain.md.
set -uo pipefail

HELM_VERSION=v3.18.6
POD_SECURITY_VERSION=v0.35.0
FORMAT=2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/tools/chart-tools"
log() { printf '[chart-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: helm and pod-security are built from their Go modules"
  exit 3
fi

CACHE_ROOT="${CHART_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/chart-tools}"
HASH="$( (printf 'format=%s\nhelm=%s\npod-security=%s\n' "$FORMAT" "$HELM_VERSION" "$POD_SECURITY_VERSION"; go env GOVERSION
  cd "$SRC" && find . \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs sha256sum) |
  sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
BIN="$DIR/bin"

link_current() { ln -sfn "$HASH" "$CACHE_ROOT/current.tmp" && mv -Tf "$CACHE_ROOT/current.tmp" "$CACHE_ROOT/current"; }
complete() { [ -x "$BIN/helm" ] && [ -x "$BIN/pod-security" ]; }
if complete; then link_current; echo "$BIN"; exit 0; fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/$HASH.lock"
if ! flock -n 9; then
  log "another build holds $CACHE_ROOT/$HASH.lock; waiting"
  flock 9
fi
if complete; then link_current; echo "$BIN"; exit 0; fi
mkdir -p "$BIN" "$DIR/logs"

export CGO_ENABLED=0
# shellcheck source=scripts/go-build-env.sh
source "$ROOT/scripts/go-build-env.sh"
NICE="${TOOLCHAIN_NICE:-15}"

build() { # name module-dir package ldflags
  local name="$1" mod="$2" pkg="$3" flags="$4" logf="$DIR/logs/$1.log" start
  [ -x "$BIN/$name" ] && return 0
  log "building $name from $pkg"
  start=$(date +%s)
  if (cd "$mod" && nice -n "$NICE" go build -trimpath -ldflags "$flags" -o "$BIN/.$name.tmp" "$pkg") > "$logf" 2>&1; then
    mv -f "$BIN/.$name.tmp" "$BIN/$name"
    log "built $name in $(( $(date +%s) - start )) s ($(du -h "$BIN/$name" | cut -f1))"
  else
    rm -f "$BIN/.$name.tmp"
    log "FAILED $name (log: $logf):"
    tail -n 15 "$logf" | sed 's/^/    /' >&2
    return 1
  fi
}

rc=0
# As Helm's own Makefile builds it: the default Kubernetes version of `helm template` (without
# --kube-version) and of `helm lint` is the one of the client-go module Helm is built with.
K8S_MODULES="$(cd "$SRC/helm" && go list -m -f '{{.Version}}' k8s.io/client-go 2>/dev/null)"
K8S_MINOR="$(echo "$K8S_MODULES" | cut -d. -f2)"
helm_flags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  [ -n "$K8S_MINOR" ] && helm_flags="$helm_flags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$K8S_MINOR"
done
build helm "$SRC/helm" helm.sh/helm/v3/cmd/helm "$helm_flags" || rc=1
build pod-security "$SRC/pod-security" . "-s -w" || rc=1
if [ "$rc" = 0 ]; then
  link_current
  # Builds for other pins are not used again.
  find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 ! -name "$HASH" ! -name "$HASH.lock" ! -name current -exec rm -rf {} +
fi
echo "$BIN"
exit "$rc"

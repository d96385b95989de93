#!/usr/bin/env bash
# Builds Argo Rollouts' controller (`rollouts-controller`) with `go build` from the pinned module in
# tools/argo-rollouts, into a cache folder outside the repository, and prints that folder's bin
# directory as the LAST line of stdout:
#
#     ARGO_ROLLOUTS_BIN=$(bash scripts/argo-rollouts.sh | tail -1)   # $ARGO_ROLLOUTS_BIN/rollouts-controller
#
# The folder is ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/argo-rollouts/<hash>/bin, where
# <hash> covers the version below, a format number, the Go version and tools/argo-rollouts' go.mod
# and go.sum. It is its own cache key, apart from scripts/toolchain.sh's. A complete folder is
# reused (well under a second). Progress and errors go to stderr. Exit codes: 0 built or reused;
# 1 the build failed (its log's last lines are printed); 3 no Go. Environment: ARGO_ROLLOUTS_CACHE
# overrides the cache root; TOOLCHAIN_NICE (default 15); `--print-dir` prints the <hash> folder
# and builds nothing.
#
# Argo Rollouts v1.8.3 is the application version of the argo-rollouts chart 2.40.4, which the
# catalog's newest runtime releases pin (runtime/versions.ts). Measured build cost:
# docs/toolchain.md, "Argo Rollouts".
set -uo pipefail

ARGO_ROLLOUTS_VERSION=v1.8.3
FORMAT=1

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$ROOT/tools/argo-rollouts"
PKG=github.com/argoproj/argo-rollouts
log() { printf '[argo-rollouts %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: the Argo Rollouts controller is built from its Go module"
  exit 3
fi

CACHE_ROOT="${ARGO_ROLLOUTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/argo-rollouts}"
HASH="$( (printf 'format=%s\nargo-rollouts=%s\n' "$FORMAT" "$ARGO_ROLLOUTS_VERSION"; go env GOVERSION
  cd "$MOD" && find . \( -name go.mod -o -name go.sum \) | LC_ALL=C sort | xargs sha256sum) |
  sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
BIN="$DIR/bin"
if [ "${1:-}" = --print-dir ]; then echo "$DIR"; exit 0; fi

complete() { [ -x "$BIN/rollouts-controller" ]; }
if complete; then echo "$BIN"; exit 0; fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/$HASH.lock"
if ! flock -n 9; then
  log "another build holds $CACHE_ROOT/$HASH.lock; waiting"
  flock 9
fi
if complete; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN" "$DIR/logs"

export CGO_ENABLED=0
# shellcheck source=scripts/go-build-env.sh
source "$ROOT/scripts/go-build-env.sh"
NICE="${TOOLCHAIN_NICE:-15}"
ldflags="-s -w -X $PKG/utils/version.version=${ARGO_ROLLOUTS_VERSION#v} -X $PKG/utils/version.gitTag=$ARGO_ROLLOUTS_VERSION"

# Two lines of the controller are changed at build time, in a copy of the module that
# hrt_patched_module (scripts/go-build-env.sh) makes in the cache folder (removed after the build,
# never committed):
#  - its metrics and /healthz servers listen on "0.0.0.0:<port>" (the ports are flags, the address
#    is not), and the tests run every server on loopback only: controller/controller.go says
#    127.0.0.1 instead, as for Argo CD's metrics and Argo Workflows' /healthz;
#  - tools/argo-rollouts builds it against Argo CD's Kubernetes modules (v1.33.3, so that the build
#    reuses what Argo CD's compiled; v1.8.3 pins v1.29.3), where the Rollout validation's call to
#    ValidatePodTemplateSpecForReplicaSet no longer takes an old template: the call passed nil for
#    it, and leaves that argument out instead (the same validation).
rc=0
log "Argo Rollouts $ARGO_ROLLOUTS_VERSION: a cold build downloads the modules and compiles for several minutes (docs/toolchain.md)"
if reason="$(hrt_patched_module "$MOD" "$PKG" "$DIR" \
  controller/controller.go 'listenAddr                         = "0.0.0.0:%d"' \
  'listenAddr                         = "127.0.0.1:%d"' \
  pkg/apis/rollouts/validation/validation.go 'ValidatePodTemplateSpecForReplicaSet(&template, nil, selector,' \
  'ValidatePodTemplateSpecForReplicaSet(&template, selector,' 2>&1)"; then
  logf="$DIR/logs/rollouts-controller.log"
  start=$(date +%s)
  log "building rollouts-controller from $PKG/cmd/rollouts-controller"
  if (cd "$MOD" && nice -n "$NICE" go build -trimpath -ldflags "$ldflags" -modfile "$DIR/src/go.mod" \
    -o "$BIN/.rollouts-controller.tmp" "$PKG/cmd/rollouts-controller") > "$logf" 2>&1; then
    mv -f "$BIN/.rollouts-controller.tmp" "$BIN/rollouts-controller"
    log "built rollouts-controller in $(( $(date +%s) - start )) s ($(du -h "$BIN/rollouts-controller" | cut -f1))"
  else
    rm -f "$BIN/.rollouts-controller.tmp"
    log "FAILED rollouts-controller (log: $logf):"
    tail -n 15 "$logf" | sed 's/^/    /' >&2
    rc=1
  fi
else
  log "FAILED rollouts-controller: $reason"
  rc=1
fi
rm -rf "$DIR/src"
# Builds for other pins are not used again.
[ "$rc" = 0 ] && find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 ! -name "$HASH" ! -name "$HASH.lock" -exec rm -rf {} +
echo "$BIN"
exit "$rc"

#!/usr/bin/env bash
# Builds Argo Workflows' `workflow-controller` with `go build` from the pinned module in
# tools/argo-workflows, into a cache folder outside the repository, and prints that folder's bin
# directory as the LAST line of stdout:
#
#     ARGO_WORKFLOWS_BIN=$(bash scripts/argo-workflows.sh | tail -1)   # $ARGO_WORKFLOWS_BIN/workflow-controller
#
# The folder is ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/argo-workflows/<hash>/bin, where
# <hash> covers the version below, a format number, the Go version and tools/argo-workflows' go.mod
# and go.sum. It is its own cache key, apart from scripts/toolchain.sh's. A complete folder is
# reused (well under a second). Progress and errors go to stderr. Exit codes: 0 built or reused;
# 1 the build failed (its log's last lines are printed); 3 no Go. Environment:
# ARGO_WORKFLOWS_CACHE overrides the cache root; TOOLCHAIN_NICE (default 15); `--print-dir` prints
# the <hash> folder and builds nothing.
#
# Argo Workflows v3.7.2 is the application version of the argo-workflows chart 0.45.24, which the
# catalog's newest runtime releases pin (runtime/versions.ts). Measured build cost:
# docs/toolchain.md, "Argo Workflows".
set -uo pipefail

ARGO_WORKFLOWS_VERSION=v3.7.2
FORMAT=1

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$ROOT/tools/argo-workflows"
PKG=github.com/argoproj/argo-workflows/v3
log() { printf '[argo-workflows %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: the workflow controller is built from its Go module"
  exit 3
fi

CACHE_ROOT="${ARGO_WORKFLOWS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/argo-workflows}"
HASH="$( (printf 'format=%s\nargo-workflows=%s\n' "$FORMAT" "$ARGO_WORKFLOWS_VERSION"; go env GOVERSION
  cd "$MOD" && find . \( -name go.mod -o -name go.sum \) | LC_ALL=C sort | xargs sha256sum) |
  sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
BIN="$DIR/bin"
if [ "${1:-}" = --print-dir ]; then echo "$DIR"; exit 0; fi

complete() { [ -x "$BIN/workflow-controller" ]; }
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
ldflags="-s -w -X $PKG.version=$ARGO_WORKFLOWS_VERSION -X $PKG.gitTag=$ARGO_WORKFLOWS_VERSION"

# One line of the controller is changed at build time: it serves /healthz on ":6060" (every
# interface, no flag to change it), and the tests run every server on loopback only.
# hrt_patched_module (scripts/go-build-env.sh) compiles a copy of the module (in the cache folder,
# removed after the build, never committed) whose cmd/workflow-controller/main.go says
# 127.0.0.1:6060 — as scripts/argocd.sh does for Argo CD's metrics address. Its Prometheus server
# is off in the controller's ConfigMap (test/e2e/harness/argo-workflows.ts) and opens no port.
rc=0
log "Argo Workflows $ARGO_WORKFLOWS_VERSION: a cold build downloads about 1.3 GB of modules and compiles for several minutes (docs/toolchain.md)"
if reason="$(hrt_patched_module "$MOD" "$PKG" "$DIR" cmd/workflow-controller/main.go \
  'http.ListenAndServe(":6060", nil)' 'http.ListenAndServe("127.0.0.1:6060", nil)' 2>&1)"; then
  logf="$DIR/logs/workflow-controller.log"
  start=$(date +%s)
  log "building workflow-controller from $PKG/cmd/workflow-controller"
  if (cd "$MOD" && nice -n "$NICE" go build -trimpath -ldflags "$ldflags" -modfile "$DIR/src/go.mod" \
    -o "$BIN/.workflow-controller.tmp" "$PKG/cmd/workflow-controller") > "$logf" 2>&1; then
    mv -f "$BIN/.workflow-controller.tmp" "$BIN/workflow-controller"
    log "built workflow-controller in $(( $(date +%s) - start )) s ($(du -h "$BIN/workflow-controller" | cut -f1))"
  else
    rm -f "$BIN/.workflow-controller.tmp"
    log "FAILED workflow-controller (log: $logf):"
    tail -n 15 "$logf" | sed 's/^/    /' >&2
    rc=1
  fi
else
  log "FAILED workflow-controller: $reason"
  rc=1
fi
rm -rf "$DIR/src"
# Builds for other pins are not used again.
[ "$rc" = 0 ] && find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 ! -name "$HASH" ! -name "$HASH.lock" -exec rm -rf {} +
echo "$BIN"
exit "$rc"

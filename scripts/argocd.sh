#!/usr/bin/env bash
# Builds Argo CD's application controller and repo-server (one binary `argocd`, which runs as
# argocd-application-controller, argocd-repo-server, argocd-git-ask-pass, or `argocd admin
# redis-initial-password` — a stand-in for the argo-cd chart's redis-secret-init Job — after
# ARGOCD_BINARY_NAME or its argv[0]: tools/argocd/servers, Argo CD's own commands linked without
# its CLI, API server, Dex, notifications, ApplicationSet controller and commit server, which the
# tests never run) and `redis-standin` with `go build` from the pinned module in tools/argocd,
# into a cache folder outside the repository, and prints that folder's bin directory as the LAST
# line of stdout:
#
#     ARGOCD_BIN=$(bash scripts/argocd.sh | tail -1)     # $ARGOCD_BIN/argocd, $ARGOCD_BIN/redis-standin
#
# The folder is ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/argocd/<hash>/bin, where <hash>
# covers the version below, the Go version and tools/argocd's go.mod, go.sum and *.go files. It is
# its own cache key, apart from scripts/toolchain.sh's: changing Argo CD does not rebuild the
# Kubernetes toolchain. A complete folder is reused (well under a second). Progress and errors go
# to stderr. Exit codes: 0 built or reused; 1 a build failed (its log's last lines are printed);
# 3 no Go. Environment: ARGOCD_CACHE overrides the cache root; TOOLCHAIN_NICE (default 15).
#
# Argo CD v3.1.5 is the application version of the catalog's newest runtime release
# (runtime/versions.ts 1.6.0, chart 8.3.7). Measured build cost and the decision to build it in
# CI: docs/toolchain.md, "Argo CD". redis-standin: tools/argocd/redis-standin/main.go (used only
# when no redis-server is on PATH).
set -uo pipefail

ARGOCD_VERSION=v3.1.5
FORMAT=3

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$ROOT/tools/argocd"
log() { printf '[argocd %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: Argo CD is built from its Go module"
  exit 3
fi

CACHE_ROOT="${ARGOCD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/argocd}"
HASH="$( (printf 'format=%s\nargocd=%s\n' "$FORMAT" "$ARGOCD_VERSION"; go env GOVERSION
  cd "$MOD" && find . \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs sha256sum) |
  sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
BIN="$DIR/bin"

complete() { [ -x "$BIN/argocd" ] && [ -x "$BIN/redis-standin" ]; }
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
ldflags="-s -w -X github.com/argoproj/argo-cd/v3/common.version=${ARGOCD_VERSION#v} -X github.com/argoproj/argo-cd/v3/common.gitTag=$ARGOCD_VERSION"

build() { # name package ldflags [go build flags...]
  local name="$1" pkg="$2" flags="$3" logf="$DIR/logs/$1.log" start
  shift 3
  [ -x "$BIN/$name" ] && return 0
  log "building $name from $pkg"
  start=$(date +%s)
  if (cd "$MOD" && nice -n "$NICE" go build -trimpath -ldflags "$flags" "$@" -o "$BIN/.$name.tmp" "$pkg") > "$logf" 2>&1; then
    mv -f "$BIN/.$name.tmp" "$BIN/$name"
    log "built $name in $(( $(date +%s) - start )) s ($(du -h "$BIN/$name" | cut -f1))"
  else
    rm -f "$BIN/.$name.tmp"
    log "FAILED $name (log: $logf):"
    tail -n 15 "$logf" | sed 's/^/    /' >&2
    return 1
  fi
}

# One line of Argo CD is changed at build time: the application controller binds its metrics
# server to 0.0.0.0 with no flag to change it, and the tests run every server on loopback only,
# so the build uses a copy of the module (in the cache folder, removed after the build, never
# committed) whose controller/appcontroller.go says 127.0.0.1, through a go.mod copy with a
# `replace` to it (a Go -overlay cannot replace files in the module cache). The repo-server has
# --address/--metrics-address flags and needs no change.
patched_source() {
  local src file
  src="$(cd "$MOD" && go mod download -json github.com/argoproj/argo-cd/v3 2>/dev/null | sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')"
  [ -n "$src" ] && [ -d "$src" ] || { log "FAILED argocd: go mod download github.com/argoproj/argo-cd/v3 gave no folder"; return 1; }
  rm -rf "$DIR/src"
  mkdir -p "$DIR/src"
  cp -r "$src" "$DIR/src/argo-cd" && chmod -R u+w "$DIR/src/argo-cd" || return 1
  file="$DIR/src/argo-cd/controller/appcontroller.go"
  sed -i 's/metricsAddr := fmt.Sprintf("0.0.0.0:%d", metricsPort)/metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsPort)/' "$file"
  if ! grep -q 'metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsPort)' "$file"; then
    log "FAILED argocd: the controller's metrics address line was not found in $src/controller/appcontroller.go"
    return 1
  fi
  cp "$MOD/go.mod" "$MOD/go.sum" "$DIR/src/"
  printf '\nreplace github.com/argoproj/argo-cd/v3 => %s\n' "$DIR/src/argo-cd" >> "$DIR/src/go.mod"
}

rc=0
[ -x "$BIN/argocd" ] || log "Argo CD $ARGOCD_VERSION: a cold build downloads about 1.7 GB of modules and compiles about 1,700 packages (docs/toolchain.md)"
if [ -x "$BIN/argocd" ] || patched_source; then
  build argocd ./servers "$ldflags" -modfile "$DIR/src/go.mod" || rc=1
  rm -rf "$DIR/src"
else
  rc=1
fi
build redis-standin ./redis-standin "-s -w" || rc=1
# Builds for other pins are not used again.
[ "$rc" = 0 ] && find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 ! -name "$HASH" ! -name "$HASH.lock" -exec rm -rf {} +
echo "$BIN"
exit "$rc"

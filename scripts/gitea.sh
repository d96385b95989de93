#!/usr/bin/env bash
# Builds Gitea (`gitea`, one binary: web server, API, admin CLI) with `go build` from the pinned
# module in tools/gitea, into a cache folder outside the repository, and prints that folder's bin
# directory as the LAST line of stdout:
#
#     GITEA_BIN=$(bash scripts/gitea.sh | tail -1)   # $GITEA_BIN/gitea
#
# The folder is ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/gitea/<hash>/bin, where <hash>
# covers the version below, a format number, the Go version and tools/gitea's go.mod and go.sum.
# Its own cache key, apart from scripts/toolchain.sh's. A complete folder is reused (well under a
# second). Progress and errors go to stderr. Exit codes: 0 built or reused; 1 the build failed (its
# log's last lines are printed); 3 no Go. Environment: GITEA_CACHE overrides the cache root;
# TOOLCHAIN_NICE (default 15); `--print-dir` prints the <hash> folder and builds nothing.
#
# The tests run it as the real Git provider of `action: pr` (docs/promotions.md, "Pull requests";
# test/integration/runtime/gitea-pull-requests.test.ts) on loopback, with the tests' PostgreSQL
# (CGO is off, so no SQLite) and the templates and options read from the module's folder (no
# `bindata` tag: the module has no generated assets). Measured build cost: docs/toolchain.md, "Gitea".
set -uo pipefail

GITEA_VERSION=v1.26.0
FORMAT=2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$ROOT/tools/gitea"
PKG=code.gitea.io/gitea
log() { printf '[gitea %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: Gitea is built from its Go module"
  exit 3
fi

CACHE_ROOT="${GITEA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/gitea}"
HASH="$( (printf 'format=%s\ngitea=%s\n' "$FORMAT" "$GITEA_VERSION"; go env GOVERSION
  cd "$MOD" && find . \( -name go.mod -o -name go.sum \) | LC_ALL=C sort | xargs sha256sum) |
  sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
BIN="$DIR/bin"
if [ "${1:-}" = --print-dir ]; then echo "$DIR"; exit 0; fi

complete() { [ -x "$BIN/gitea" ] && [ -d "$BIN/static/templates" ]; }
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

rc=0
log "Gitea $GITEA_VERSION: a cold build downloads its modules and compiles for several minutes (docs/toolchain.md)"
logf="$DIR/logs/gitea.log"
start=$(date +%s)
if (cd "$MOD" && nice -n "$NICE" go build -trimpath \
  -ldflags "-s -w -X main.Version=${GITEA_VERSION#v}" -o "$BIN/.gitea.tmp" "$PKG") > "$logf" 2>&1; then
  # The web server reads its templates, options (locales, licences) and public files from its
  # static root: the module's own folders, copied beside the binary.
  src="$(cd "$MOD" && go list -m -f '{{.Dir}}' "$PKG")"
  rm -rf "$BIN/static" && mkdir -p "$BIN/static"
  if [ -n "$src" ] && cp -r "$src/templates" "$src/options" "$src/public" "$BIN/static/" && chmod -R u+w "$BIN/static"; then
    mv -f "$BIN/.gitea.tmp" "$BIN/gitea"
    log "built gitea in $(( $(date +%s) - start )) s ($(du -h "$BIN/gitea" | cut -f1))"
  else
    log "FAILED gitea: its templates and options could not be copied from '$src'"
    rc=1
  fi
else
  rm -f "$BIN/.gitea.tmp"
  log "FAILED gitea (log: $logf):"
  tail -n 15 "$logf" | sed 's/^/    /' >&2
  rc=1
fi
# Builds for other pins are not used again.
[ "$rc" = 0 ] && find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 ! -name "$HASH" ! -name "$HASH.lock" -exec rm -rf {} +
echo "$BIN"
exit "$rc"

#!/usr/bin/env bash
# Builds the vcluster binary (its syncer and virtual control plane, `vcluster start`) of every
# vcluster version the runtime catalog pins, and kine (the etcd shim vcluster runs over SQLite for
# its embedded database, /binaries/kine in the vcluster pod), with `go build` from the modules
# pinned in tools/vcluster-<version> and tools/kine, into a cache folder outside the repository,
# and prints that folder's bin directory as the LAST line of stdout:
#
#     VCLUSTER_BIN=$(bash scripts/vcluster.sh | tail -1)
#     # $VCLUSTER_BIN/<version>/vcluster for each version below, $VCLUSTER_BIN/kine
#
# The folder is ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/vcluster/<hash>/bin, where <hash>
# covers the versions below, the Go version and both tools modules' go.mod and go.sum: its own
# cache key, apart from the toolchain's and the provider plugin's. A complete folder is reused
# (well under a second). bin/versions.txt names each binary's module and version (the e2e tier
# prints it; sandbox/vcluster-pods.ts reads the versions it can run from the folder names). Progress and errors go to stderr. Exit codes: 0 built or reused; 1 a build failed
# (its log's last lines are printed); 3 no Go. Environment: VCLUSTER_CACHE overrides the cache
# root; TOOLCHAIN_NICE (default 15).
#
# vcluster v0.33.1 and v0.34.0 are versions the Go module proxy serves exactly (its version list
# is refused), one minor apart: the catalog's upgrade path (docs/decisions.md). Their charts come
# from the same module zips (scripts/chart-mirror.sh). Each is built as its release image builds
# it (CGO off, the version in pkg/telemetry.SyncerVersion); tools/vcluster-0.33.1 requires every
# other module at the version 0.34.0 builds with, so the second build reuses the first's compiled
# packages (docs/toolchain.md, "Shared dependency versions"). kine v0.14.4: from 0.33 the vcluster image
# carries no kine (the chart's init container copies it from the distro image into /binaries);
# this is the kine vcluster 0.30's image shipped, the last one its Dockerfile names. Its SQLite
# driver needs cgo (a C compiler), and the dbstat table kine reads for the database size is
# compiled in as in kine's own release build. Measured build cost: docs/toolchain.md, "vcluster".
set -uo pipefail

VCLUSTER_VERSIONS="0.33.1 0.34.0"
KINE_VERSION=0.14.4
FORMAT=2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[vcluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: vcluster and kine are built from their Go modules"
  exit 3
fi

CACHE_ROOT="${VCLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/vcluster}"
HASH="$( (printf 'format=%s\nvcluster=%s\nkine=%s\n' "$FORMAT" "$VCLUSTER_VERSIONS" "$KINE_VERSION"; go env GOVERSION
  cd "$ROOT/tools" && for v in $VCLUSTER_VERSIONS; do find "vcluster-$v" \( -name go.mod -o -name go.sum \); done |
    LC_ALL=C sort | xargs sha256sum; find kine \( -name go.mod -o -name go.sum \) | LC_ALL=C sort | xargs sha256sum) |
  sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
BIN="$DIR/bin"

complete() {
  local v
  for v in $VCLUSTER_VERSIONS; do [ -x "$BIN/$v/vcluster" ] || return 1; done
  [ -x "$BIN/kine" ] && [ -s "$BIN/versions.txt" ]
}
if complete; then echo "$BIN"; exit 0; fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/$HASH.lock"
if ! flock -n 9; then
  log "another build holds $CACHE_ROOT/$HASH.lock; waiting"
  flock 9
fi
if complete; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN" "$DIR/logs"

# shellcheck source=scripts/go-build-env.sh
source "$ROOT/scripts/go-build-env.sh"
NICE="${TOOLCHAIN_NICE:-15}"

build() { # name (a path under bin/) module-dir cgo package ldflags label
  local name=$1 mod=$2 cgo=$3 pkg=$4 ldflags=$5 logf="$DIR/logs/${1//\//-}.log" start
  mkdir -p "$(dirname "$BIN/$name")"
  start=$(date +%s)
  : > "$logf"
  if ! (cd "$ROOT/tools/$mod" && CGO_ENABLED=$cgo nice -n "$NICE" go build -trimpath -ldflags "$ldflags" \
    -o "$BIN/$name.tmp" "$pkg") >> "$logf" 2>&1 < /dev/null; then
    log "FAILED $name (log: $logf):"
    tail -n 15 "$logf" | sed 's/^/    /' >&2
    rm -f "$BIN/$name.tmp"
    echo "$BIN"
    exit 1
  fi
  mv -f "$BIN/$name.tmp" "$BIN/$name"
  log "built $name in $(( $(date +%s) - start )) s ($(du -h "$BIN/$name" | cut -f1))"
  printf '%s\t%s\tbuild_seconds=%s\n' "$name" "$6" "$(( $(date +%s) - start ))" >> "$DIR/versions.tmp"
}

log "vcluster $VCLUSTER_VERSIONS and kine $KINE_VERSION: a cold build compiles about 1,000 CPU-seconds of Go (docs/toolchain.md)"
: > "$DIR/versions.tmp"
for v in $VCLUSTER_VERSIONS; do
  build "$v/vcluster" "vcluster-$v" 0 github.com/loft-sh/vcluster/cmd/vcluster \
    "-s -w -X github.com/loft-sh/vcluster/pkg/telemetry.SyncerVersion=$v" \
    "github.com/loft-sh/vcluster $v"
done
CGO_CFLAGS="${CGO_CFLAGS:-} -DSQLITE_ENABLE_DBSTAT_VTAB=1 -DSQLITE_USE_ALLOCA=1" \
  build kine kine 1 github.com/k3s-io/kine \
  "-s -w -X github.com/k3s-io/kine/pkg/version.Version=v$KINE_VERSION" \
  "github.com/k3s-io/kine $KINE_VERSION"
mv -f "$DIR/versions.tmp" "$BIN/versions.txt"
# Builds for other pins are not used again.
find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 ! -name "$HASH" ! -name "$HASH.lock" -exec rm -rf {} +
echo "$BIN"
exit 0

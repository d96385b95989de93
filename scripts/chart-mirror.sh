#!/usr/bin/env bash
# Assembles the chart mirror the tests, the sandbox and `provisioner runtime render` read: every
# chart of the shared mirror (HRT_CHART_MIRROR, else `shared/charts` beside the repository's
# folder) linked unmodified, plus the chart of each vcluster version the runtime catalog pins that
# the shared mirror lacks, packaged from that release's Go module zip (tools/vcluster-<version>,
# the very module scripts/vcluster.sh builds the binary from, checked against its go.sum): the zip
# carries the chart in `chart/` with the placeholder version 0.0.1, which becomes the release's
# version, as loft-sh's release pipeline sets it; nothing else in the chart changes. Prints the
# folder as the LAST line of stdout:
#
#     export HRT_CHART_MIRROR=$(bash scripts/chart-mirror.sh | tail -1)
#
# The folder is ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/chart-mirror/<hash>, <hash> covering
# the shared mirror's path and file list and the vcluster versions; a complete folder is reused,
# and <cache>/current links to it (`provisioner runtime render` reads it when PROVISIONER_CHARTS_DIR
# is not set). A source that is itself an assembled mirror is printed as it is. Exit codes: 0 assembled or
# reused; 1 the shared mirror is missing or a chart could not be packaged (the reason on stderr);
# 3 no Go (the vcluster charts come from Go module zips). Environment: CHART_MIRROR_CACHE
# overrides the cache root.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FORMAT=1
log() { printf '[chart-mirror %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

SOURCE="${HRT_CHART_MIRROR:-$(cd "$ROOT/.." && pwd)/shared/charts}"
if [ -f "$SOURCE/.assembled" ]; then echo "$SOURCE"; exit 0; fi
if ! ls "$SOURCE"/*.tgz >/dev/null 2>&1; then
  log "no chart mirror at $SOURCE (the real vcluster and Argo charts, <chart>-<version>.tgz; set HRT_CHART_MIRROR)"
  exit 1
fi
SOURCE="$(cd "$SOURCE" && pwd)"

# The vcluster versions whose module is pinned in tools/ (one folder per version the catalog pins;
# test/unit/vcluster-versions.test.ts keeps the two lists equal).
mapfile -t VERSIONS < <(cd "$ROOT/tools" && ls -d vcluster-*/ 2>/dev/null | sed 's#^vcluster-##; s#/$##' | LC_ALL=C sort)
NEEDED=()
for v in "${VERSIONS[@]}"; do [ -f "$SOURCE/vcluster-$v.tgz" ] || NEEDED+=("$v"); done

CACHE_ROOT="${CHART_MIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/chart-mirror}"
HASH="$( (printf 'format=%s\nsource=%s\nversions=%s\n' "$FORMAT" "$SOURCE" "${NEEDED[*]}"
  (cd "$SOURCE" && ls -l --time-style=+%s -- *.tgz)
  for v in "${NEEDED[@]}"; do printf "%s " "$v"; sha256sum < "$ROOT/tools/vcluster-$v/go.sum"; done) | sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
link_current() { ln -sfn "$HASH" "$CACHE_ROOT/current.tmp" && mv -Tf "$CACHE_ROOT/current.tmp" "$CACHE_ROOT/current"; }
if [ -f "$DIR/.assembled" ]; then link_current; echo "$DIR"; exit 0; fi

if [ ${#NEEDED[@]} -gt 0 ] && ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: the charts of vcluster ${NEEDED[*]} come from its Go module"
  exit 3
fi

mkdir -p "$CACHE_ROOT"
TMP="$(mktemp -d "$CACHE_ROOT/.assembling.XXXXXX")"
chmod 755 "$TMP"
trap 'rm -rf "$TMP"' EXIT
for f in "$SOURCE"/*.tgz; do ln -s "$f" "$TMP/$(basename "$f")"; done
for v in "${NEEDED[@]}"; do
  # -mod=readonly with the folder's go.sum: the zip is the one whose checksum the repository pins.
  moddir="$(cd "$ROOT/tools/vcluster-$v" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
    go mod download -json "github.com/loft-sh/vcluster" 2>"$TMP/.err" |
    sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')"
  if [ -z "$moddir" ] || [ ! -f "$moddir/chart/Chart.yaml" ]; then
    log "vcluster $v: its module (and chart) could not be downloaded:"
    sed 's/^/    /' "$TMP/.err" >&2
    exit 1
  fi
  mkdir -p "$TMP/.pkg/$v"
  cp -R "$moddir/chart" "$TMP/.pkg/$v/vcluster"
  chmod -R u+w "$TMP/.pkg/$v/vcluster"
  if ! grep -qE '^version: 0\.0\.1( |$)' "$TMP/.pkg/$v/vcluster/Chart.yaml"; then
    log "vcluster $v: chart/Chart.yaml does not carry the placeholder version 0.0.1; not packaged"
    exit 1
  fi
  sed -i -E "s/^version: 0\\.0\\.1.*/version: $v/" "$TMP/.pkg/$v/vcluster/Chart.yaml"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$TMP/.pkg/$v" -czf "$TMP/vcluster-$v.tgz" vcluster
  log "vcluster-$v.tgz packaged from its module's chart/"
done
rm -rf "$TMP/.pkg" "$TMP/.err"
printf 'shared mirror: %s\npackaged from Go modules: %s\n' "$SOURCE" "${NEEDED[*]:-none}" > "$TMP/.assembled"
rm -rf "$DIR"
mv -T "$TMP" "$DIR" 2>/dev/null || { [ -f "$DIR/.assembled" ] || { log "could not move $TMP to $DIR"; exit 1; }; }
trap - EXIT
link_current
# Assemblies of other sources or versions are not used again.
find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 ! -name "$HASH" ! -name current ! -name '.assembling.*' -exec rm -rf {} +
echo "$DIR"
exit 0

#!/usr/bin/env bash
# Builds the Pulumi Kubernetes provider plugin `pulumi-resource-kubernetes` with `go build` from
# the pinned module in tools/pulumi-kubernetes, into a cache folder outside the repository, and
# prints that folder's bin directory as the LAST line of stdout:
#
#     PROVIDER_BIN=$(bash scripts/kubernetes-provider.sh | tail -1)   # $PROVIDER_BIN/pulumi-resource-kubernetes
#
# The folder is ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/kubernetes-provider/<hash>/bin,
# where <hash> covers the version below, the Go version and tools/pulumi-kubernetes's go.mod and
# go.sum. It is its own cache key, apart from scripts/toolchain.sh's: changing the provider does
# not rebuild the Kubernetes toolchain. A complete folder is reused (well under a second).
# Progress and errors go to stderr. Exit codes: 0 built or reused; 1 the build failed (its log's
# last lines are printed); 3 no Go. Environment: KUBERNETES_PROVIDER_CACHE overrides the cache
# root; TOOLCHAIN_NICE (default 15).
#
# The module github.com/pulumi/pulumi-kubernetes/provider/v4 is served only as the pseudo-version
# v4.0.0-20260115033456-f47bc2d6f199, whose commit is the v4.25.0 release tag; the binary is
# labelled 4.25.0 through the version variable the provider's own release build sets. The main
# package embeds schema-embed.json and terraform-mapping-embed.json, which its `go:generate` step
# (cmd/pulumi-resource-kubernetes/generate.go) makes from schema.json and terraform-mapping.json
# (both in the module zip, the schema's version field set to the release version); the build
# runs that same generate.go on a copy of the module in the cache folder (removed after the
# build, never committed) and compiles the copy through a go.mod copy with a `replace` to it.
# Measured build cost: docs/toolchain.md, "Kubernetes provider plugin".
set -uo pipefail

PROVIDER_MODULE=github.com/pulumi/pulumi-kubernetes/provider/v4
PROVIDER_VERSION=4.25.0
FORMAT=2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$ROOT/tools/pulumi-kubernetes"
log() { printf '[kubernetes-provider %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: the Kubernetes provider plugin is built from its Go module"
  exit 3
fi

CACHE_ROOT="${KUBERNETES_PROVIDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/kubernetes-provider}"
HASH="$( (printf 'format=%s\nprovider=%s\n' "$FORMAT" "$PROVIDER_VERSION"; go env GOVERSION
  cd "$MOD" && find . \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs sha256sum) |
  sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
BIN="$DIR/bin"
NAME=pulumi-resource-kubernetes

complete() { [ -x "$BIN/$NAME" ]; }
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
LOGF="$DIR/logs/$NAME.log"
SRC="$DIR/src"

failed() {
  log "FAILED $NAME: $1 (log: $LOGF):"
  tail -n 15 "$LOGF" | sed 's/^/    /' >&2
  rm -rf "$SRC" "$BIN/.$NAME.tmp"
  echo "$BIN"
  exit 1
}

log "Kubernetes provider $PROVIDER_VERSION: a cold build compiles about 350 CPU-seconds of Go (docs/toolchain.md)"
start=$(date +%s)
: > "$LOGF"
(
  # The module's folder in the module cache (downloaded first when missing).
  moddir="$(cd "$MOD" && go mod download -json "$PROVIDER_MODULE" | sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')"
  [ -n "$moddir" ] && [ -d "$moddir" ] || { echo "go mod download $PROVIDER_MODULE gave no folder"; exit 1; }
  rm -rf "$SRC" && mkdir -p "$SRC/gen" &&
    cp -r "$moddir" "$SRC/provider" && chmod -R u+w "$SRC/provider" &&
    cp "$MOD/go.mod" "$MOD/go.sum" "$SRC/" &&
    printf '\nreplace %s => ./provider\n' "$PROVIDER_MODULE" >> "$SRC/go.mod" &&
    cp "$SRC/provider/cmd/$NAME/generate.go" "$SRC/gen/generate.go" || exit 1
  # The component resources the product never creates (yaml/v2 ConfigFile and ConfigGroup,
  # helm.sh/v4 Chart, kustomize/v2 Directory) are left out: their providers import the whole
  # generated Go SDK (sdk/v4/go/kubernetes/*, 26 MB of source), most of a cold build's compile.
  # Constructing one answers `unknown resource type "kubernetes:helm.sh/v4:Chart"`. Every line
  # changed must be found, so a new provider version that moved them fails here, by name.
  construct="$SRC/provider/pkg/provider/provider_construct.go"
  for line in \
    'providerhelmv4 "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider/helm/v4"' \
    'providerkustomizev2 "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider/kustomize/v2"' \
    'provideryamlv2 "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider/yaml/v2"' \
    '"kubernetes:yaml/v2:ConfigFile":     provideryamlv2.NewConfigFileProvider,' \
    '"kubernetes:yaml/v2:ConfigGroup":    provideryamlv2.NewConfigGroupProvider,' \
    '"kubernetes:helm.sh/v4:Chart":       providerhelmv4.NewChartProvider,' \
    '"kubernetes:kustomize/v2:Directory": providerkustomizev2.NewDirectoryProvider,'; do
    grep -qxF -- "	$line" "$construct" || { echo "not found in $construct: $line"; exit 1; }
    LINE="	$line" perl -ni -e 'print unless $_ eq "$ENV{LINE}\n"' "$construct" || exit 1
  done
  echo "left out the yaml/v2, helm.sh/v4 and kustomize/v2 component resources"
  cd "$SRC" &&
    nice -n "$NICE" go build -trimpath -o "$SRC/gen/generate" ./gen/generate.go &&
    (cd "provider/cmd/$NAME" && VERSION="$PROVIDER_VERSION" "$SRC/gen/generate") &&
    [ -s "provider/cmd/$NAME/schema-embed.json" ] && [ -s "provider/cmd/$NAME/terraform-mapping-embed.json" ] || exit 1
  echo "generated schema-embed.json and terraform-mapping-embed.json (version $PROVIDER_VERSION)"
  nice -n "$NICE" go build -trimpath \
    -ldflags "-s -w -X $PROVIDER_MODULE/pkg/version.Version=$PROVIDER_VERSION" \
    -o "$BIN/.$NAME.tmp" "$PROVIDER_MODULE/cmd/$NAME"
) >> "$LOGF" 2>&1 < /dev/null || failed "go build"
mv -f "$BIN/.$NAME.tmp" "$BIN/$NAME"
rm -rf "$SRC"
log "built $NAME in $(( $(date +%s) - start )) s ($(du -h "$BIN/$NAME" | cut -f1))"
printf '%s\t%s %s\t%s\n' "$NAME" "$PROVIDER_MODULE" "$PROVIDER_VERSION" "build_seconds=$(( $(date +%s) - start ))" > "$DIR/versions.txt"
# Builds for other pins are not used again.
find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 ! -name "$HASH" ! -name "$HASH.lock" -exec rm -rf {} +
echo "$BIN"
exit 0

#!/usr/bin/env bash
# Builds the Kubernetes provider test double (pulumi-resource-kubernetes, see main.go) with
# `go build` from this Go module, into a cache folder outside the repository, and prints the
# binary's path as the LAST line of stdout. Progress goes to stderr. The folder is
#     ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/provider-double/<hash>/
# where <hash> covers this folder's go.mod, go.sum and *.go files and the Go version; a built
# binary is reused as is (builds of other sources are removed). Used by test/e2e/prepare.sh when no real provider plugin is given.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${PROVIDER_DOUBLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/provider-double}"
hash="$( (go env GOVERSION; cd "$HERE" && find . -maxdepth 1 \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -c1-16)"
out="$CACHE_ROOT/$hash/pulumi-resource-kubernetes"
if [ ! -x "$out" ]; then
  echo "[provider-double] building $out (go build; a cold module cache downloads the Helm and Kubernetes client modules)" >&2
  start=$(date +%s)
  mkdir -p "$CACHE_ROOT/$hash"
  (cd "$HERE" && GOFLAGS=-mod=mod nice -n "${TOOLCHAIN_NICE:-15}" go build -trimpath -ldflags='-s -w' -o "$out.tmp" .)
  mv "$out.tmp" "$out"
  echo "[provider-double] built in $(( $(date +%s) - start )) s ($(du -m "$out" | cut -f1) MB)" >&2
  # Builds of earlier sources are not used again.
  find "$CACHE_ROOT" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" -exec rm -rf {} +
fi
echo "$out"

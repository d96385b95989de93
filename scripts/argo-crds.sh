#!/usr/bin/env bash
# Fetches the real Argo CustomResourceDefinitions the runtime's agents work with (Application and
# AppProject from Argo CD, Rollout from Argo Rollouts, Workflow from Argo Workflows) out of the
# projects' Go modules, into a cache folder outside the repository, and prints that folder as the
# LAST line of stdout:
#
#     CRDS=$(bash scripts/argo-crds.sh | tail -1)
#
# The versions are the application versions of the newest runtime release in the catalog
# (runtime/versions.ts: 1.6.0 = Argo CD v3.1.5, Argo Rollouts v1.8.3, Argo Workflows v3.7.2).
# The Workflow CRD is the "minimal" one the Argo Workflows installation manifests and chart use
# by default (spec and status kept as they come, no status subresource); the full-schema variant
# is 3 MiB and meant for server-side apply only.
#
# Files in the folder (one CRD each, as the module ships it):
#   applications.argoproj.io.yaml  appprojects.argoproj.io.yaml  rollouts.argoproj.io.yaml
#   workflows.argoproj.io.yaml     SOURCES.txt (module, version and path of each file)
#
# A complete folder is reused (well under a second). Progress and errors go to stderr.
# Exit codes: 0 the folder is complete; 1 something could not be fetched (the reason is printed);
# 3 no Go. Environment: ARGO_CRDS_CACHE overrides
# ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/argo-crds. Fetched files are never committed.
set -uo pipefail

# ---- pinned versions (the catalog's newest runtime release) -------------------------------
ARGO_CD_VERSION=v3.1.5
ARGO_ROLLOUTS_VERSION=v1.8.3
ARGO_WORKFLOWS_VERSION=v3.7.2
FORMAT=1
# --------------------------------------------------------------------------------------------

# name  module  version  path-in-module
CRDS=(
  "applications.argoproj.io github.com/argoproj/argo-cd/v3 $ARGO_CD_VERSION manifests/crds/application-crd.yaml"
  "appprojects.argoproj.io github.com/argoproj/argo-cd/v3 $ARGO_CD_VERSION manifests/crds/appproject-crd.yaml"
  "rollouts.argoproj.io github.com/argoproj/argo-rollouts $ARGO_ROLLOUTS_VERSION manifests/crds/rollout-crd.yaml"
  "workflows.argoproj.io github.com/argoproj/argo-workflows/v3 $ARGO_WORKFLOWS_VERSION manifests/base/crds/minimal/argoproj.io_workflows.yaml"
)

log() { printf '[argo-crds] %s\n' "$*" >&2; }

CACHE_ROOT="${ARGO_CRDS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/argo-crds}"
DIR="$CACHE_ROOT/argo-cd-$ARGO_CD_VERSION+argo-rollouts-$ARGO_ROLLOUTS_VERSION+argo-workflows-$ARGO_WORKFLOWS_VERSION+f$FORMAT"

complete() {
  local entry name
  [ -s "$DIR/SOURCES.txt" ] || return 1
  for entry in "${CRDS[@]}"; do
    read -r name _ <<<"$entry"
    [ -s "$DIR/$name.yaml" ] || return 1
  done
}

if complete; then echo "$DIR"; exit 0; fi

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: the Argo CRDs are taken from the Argo projects' Go modules"
  exit 3
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$DIR.lock"
flock 9
if complete; then echo "$DIR"; exit 0; fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/out"

# `go mod download -json` prints the module's Zip and, once extracted, its Dir. A module whose
# go.mod asks for a newer Go than the local one is downloaded but not extracted (its "Error" says
# so); the file is then read from the zip.
json_field() { sed -nE "s/^[[:space:]]*\"$1\": \"(.*)\",?$/\1/p" | head -n 1; }

fetch_one() { # name module version path
  local name="$1" mod="$2" ver="$3" path="$4" json dir zip err
  json="$(cd "$WORK" && GOFLAGS= GOTOOLCHAIN=local GO111MODULE=on go mod download -json "$mod@$ver" 2>&1)"
  dir="$(json_field Dir <<<"$json")"
  zip="$(json_field Zip <<<"$json")"
  if [ -n "$dir" ] && [ -f "$dir/$path" ]; then
    cp "$dir/$path" "$WORK/out/$name.yaml" && chmod 0644 "$WORK/out/$name.yaml"
  elif [ -n "$zip" ] && [ -f "$zip" ] && command -v unzip >/dev/null 2>&1; then
    unzip -p "$zip" "$mod@$ver/$path" > "$WORK/out/$name.yaml" 2>/dev/null || true
  fi
  if [ ! -s "$WORK/out/$name.yaml" ]; then
    err="$(json_field Error <<<"$json")"
    [ -n "$err" ] || err="$(printf '%s\n' "$json" | tail -n 3 | tr '\n' ' ')"
    log "FAILED $name: $path not obtained from $mod@$ver: $err"
    return 1
  fi
  if ! grep -q '^kind: CustomResourceDefinition' "$WORK/out/$name.yaml" ||
     ! grep -qE "^  name: $name\$" "$WORK/out/$name.yaml"; then
    log "FAILED $name: $mod@$ver/$path is not the CustomResourceDefinition $name"
    return 1
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$mod" "$ver" "$path" >> "$WORK/out/SOURCES.txt"
  log "$name: $mod@$ver/$path ($(stat -c %s "$WORK/out/$name.yaml") bytes)"
}

failed=0
for entry in "${CRDS[@]}"; do
  # shellcheck disable=SC2086
  fetch_one $entry || failed=1
done
if [ "$failed" = 1 ]; then
  log "the Argo CRDs are incomplete; nothing written to $DIR"
  exit 1
fi
rm -rf "$DIR"
mv "$WORK/out" "$DIR"
echo "$DIR"

#!/usr/bin/env bash
# Builds the end-to-end toolchain (Kubernetes control plane, etcd, KWOK, Pulumi CLI, Node.js
# language host) with `go build` from pinned Go modules, into a
# cache folder outside the repository, and prints that folder's bin directory as the LAST
# line of stdout:
#
#     BIN=$(bash scripts/toolchain.sh | tail -1)
#
# Progress goes to stderr. The cache folder is
#     ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/toolchain/<hash>/bin
# where <hash> covers the pinned versions below, the Go version and every go.mod/go.sum under
# tools/. A complete folder is reused as is (the second run takes well under a second).
#
# Every binary is attempted even when an earlier one fails. Failures are listed in
# <bin>/../FAILED (one line each: binary, error, log file) and the script then exits 1, still
# printing the bin directory last so that callers can use what was built. A later run retries
# only the binaries that are missing. <bin>/../versions.txt records what each binary is.
#
# Options:
#   --force        delete this hash's folder first and rebuild everything
#   --only NAME    build only the named binary (repeatable), e.g. --only kwok
#   --print-dir    print the cache folder that would be used and exit (no build)
#
# Environment:
#   TOOLCHAIN_CACHE      overrides ${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/toolchain
#   TOOLCHAIN_NICE       niceness of the compiler processes (default 15)
#
# The Kubernetes provider plugin (pulumi-resource-kubernetes) is built by
# scripts/kubernetes-provider.sh from tools/pulumi-kubernetes, under its own cache key.
#
# Documentation, measured build times and the smoke test: docs/toolchain.md, tools/smoke.sh.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/tools"

# ---- pinned versions -----------------------------------------------------------------
# Bump TOOLCHAIN_FORMAT when the way binaries are built changes without a version change.
TOOLCHAIN_FORMAT=4              # 3: the Pulumi CLI without the cloud state and secrets backends; 4: and without zxcvbn
K8S_VERSION=v1.35.0             # tools/kubernetes: k8s.io/kubernetes + staging modules v0.35.0, vcluster's versions
ETCD_VERSION=v3.6.7             # tools/etcd: the etcd client modules of Kubernetes v1.35.0 (it names server 3.6.6)
KWOK_VERSION=v0.8.0             # tools/kwok
PULUMI_VERSION=v3.259.0         # tools/pulumi: newest pkg/v3 the Go module proxy serves
PULUMI_NODEJS_HOST_VERSION=v3.68.0  # tools/pulumi-language-nodejs: last SDK release containing it
# A former input, kept so that the cache key (and the cached build) stays the same: the provider
# plugin is built by scripts/kubernetes-provider.sh, not here.
PULUMI_KUBERNETES_WANTED=v4.34.2
# ---------------------------------------------------------------------------------------

CACHE_ROOT="${TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/toolchain}"
NICE="${TOOLCHAIN_NICE:-15}"
FORCE=0
PRINT_DIR=0
ONLY=()
while [ $# -gt 0 ]; do
  case "$1" in
    --force) FORCE=1 ;;
    --only) shift; ONLY+=("${1:?--only needs a binary name}") ;;
    --print-dir) PRINT_DIR=1 ;;
    -h|--help) sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "toolchain: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

log() { printf '[toolchain %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed: cannot build the toolchain (see docs/toolchain.md)"
  exit 3
fi
GO_VERSION="$(go env GOVERSION)"

# ---- cache key -----------------------------------------------------------------------
hash_inputs() {
  printf 'format=%s\nk8s=%s\netcd=%s\nkwok=%s\npulumi=%s\nnodejs-host=%s\nkubernetes-provider=%s\ngo=%s\n' \
    "$TOOLCHAIN_FORMAT" "$K8S_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" "$PULUMI_VERSION" \
    "$PULUMI_NODEJS_HOST_VERSION" "$PULUMI_KUBERNETES_WANTED" "$GO_VERSION"
  # tools/argocd, tools/argo-workflows, tools/argo-rollouts, tools/gitea, tools/chart-tools,
  # tools/pulumi-kubernetes, tools/vcluster-<version> and tools/kine are built by scripts/argocd.sh,
  # scripts/argo-workflows.sh, scripts/argo-rollouts.sh, scripts/gitea.sh, scripts/chart-tools.sh,
  # scripts/kubernetes-provider.sh and scripts/vcluster.sh under their own cache keys: not part of
  # this hash.
  (cd "$TOOLS" && find . \( -path ./argocd -o -path ./argo-workflows -o -path ./argo-rollouts -o -path ./gitea -o -path ./chart-tools -o -path ./pulumi-kubernetes -o -path './vcluster-*' -o -path ./kine \) -prune -o \( -name go.mod -o -name go.sum -o -name '*.go' \) -print |
    LC_ALL=C sort | while read -r f; do
    printf '%s ' "$f"; sha256sum < "$f"
  done)
}
HASH="$(hash_inputs | sha256sum | cut -c1-16)"
DIR="$CACHE_ROOT/$HASH"
BIN="$DIR/bin"
if [ "$PRINT_DIR" = 1 ]; then echo "$DIR"; exit 0; fi

ALL=(etcd etcdctl kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl
     pulumi pulumi-language-nodejs)
if [ ${#ONLY[@]} -gt 0 ]; then WANT=("${ONLY[@]}"); else WANT=("${ALL[@]}"); fi

# Everything wanted is present and nothing failed:
complete() {
  [ -f "$DIR/FAILED" ] && return 1
  local b
  for b in "${WANT[@]}"; do [ -x "$BIN/$b" ] || return 1; done
  if [[ " ${WANT[*]} " == *" kwok "* ]]; then [ -s "$DIR/share/kwok-stages.yaml" ] || return 1; fi
  return 0
}

if [ "$FORCE" = 0 ] && complete; then
  log "reusing $DIR"
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
# One builder at a time per cache folder; a second caller waits and then reuses the result.
exec 9>"$CACHE_ROOT/$HASH.lock"
if ! flock -n 9; then
  log "another toolchain build holds $CACHE_ROOT/$HASH.lock; waiting"
  flock 9
fi
if [ "$FORCE" = 1 ]; then rm -rf "$DIR"; fi
if complete; then log "reusing $DIR (built by a concurrent run)"; echo "$BIN"; exit 0; fi

mkdir -p "$BIN" "$DIR/logs"
FAILED_TMP="$DIR/FAILED.tmp"
: > "$FAILED_TMP"
rm -f "$DIR/FAILED"
SECONDS_TOTAL_START=$(date +%s)

export CGO_ENABLED=0
# shellcheck source=scripts/go-build-env.sh
source "$ROOT/scripts/go-build-env.sh"

record_version() { # name version-line build-seconds
  local name="$1" line="$2" secs="$3" size
  size=$(stat -c %s "$BIN/$name" 2>/dev/null || echo 0)
  grep -v "^$name	" "$DIR/versions.txt" 2>/dev/null > "$DIR/versions.txt.tmp" || true
  printf '%s\t%s\tbuild_seconds=%s\tsize_bytes=%s\n' "$name" "$line" "$secs" "$size" >> "$DIR/versions.txt.tmp"
  LC_ALL=C sort "$DIR/versions.txt.tmp" > "$DIR/versions.txt"
  rm -f "$DIR/versions.txt.tmp"
}

fail() { # name logfile
  local name="$1" logf="$2" err
  err="$(grep -v '^go: downloading' "$logf" 2>/dev/null | grep -m1 -E 'error|cannot|undefined|[0-9]+:[0-9]+: |fatal|Forbidden|not available' || true)"
  [ -n "$err" ] || err="$(tail -1 "$logf" 2>/dev/null)"
  printf '%s: %s (log: %s)\n' "$name" "$err" "$logf" >> "$FAILED_TMP"
  log "FAILED $name: $err"
  tail -n 15 "$logf" | sed 's/^/    /' >&2
}

wanted() { [[ " ${WANT[*]} " == *" $1 "* ]]; }

# Whether NAME is to be built by this run (wanted, and missing or --force).
to_build() { wanted "$1" && { [ ! -x "$BIN/$1" ] || [ "$FORCE" = 1 ]; }; }

# build NAME MODULE_DIR PACKAGE VERSION_LINE [LDFLAGS...]; go build's own arguments before these
# in MODFILE_ARGS (-modfile of a patched module's copy, see the Pulumi CLI).
MODFILE_ARGS=()
build() {
  local name="$1" moddir="$2" pkg="$3" vline="$4"; shift 4
  wanted "$name" || return 0
  if [ -x "$BIN/$name" ] && [ "$FORCE" = 0 ]; then log "$name: present"; return 0; fi
  local logf="$DIR/logs/$name.log" start end
  log "building $name ($vline) from $pkg"
  start=$(date +%s)
  if (cd "$moddir" && nice -n "$NICE" go build -trimpath "${MODFILE_ARGS[@]}" -ldflags "-s -w $*" \
        -o "$BIN/.$name.tmp" "$pkg") > "$logf" 2>&1; then
    mv -f "$BIN/.$name.tmp" "$BIN/$name"
    end=$(date +%s)
    record_version "$name" "$vline" "$((end - start))"
    log "built $name in $((end - start)) s ($(du -h "$BIN/$name" | cut -f1))"
  else
    rm -f "$BIN/.$name.tmp"
    fail "$name" "$logf"
  fi
}

# ---- etcd ----------------------------------------------------------------------------
build etcd "$TOOLS/etcd" go.etcd.io/etcd/server/v3 "go.etcd.io/etcd/server/v3 $ETCD_VERSION"
build etcdctl "$TOOLS/etcd" go.etcd.io/etcd/etcdctl/v3 "go.etcd.io/etcd/etcdctl/v3 $ETCD_VERSION"

# ---- Kubernetes ----------------------------------------------------------------------
k8s_minor="${K8S_VERSION#v1.}"; k8s_minor="${k8s_minor%%.*}"
K8S_LDFLAGS=()
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  K8S_LDFLAGS+=("-X $p.gitVersion=$K8S_VERSION" "-X $p.gitMajor=1" "-X $p.gitMinor=$k8s_minor"
                "-X $p.gitTreeState=clean")
done
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build "$b" "$TOOLS/kubernetes" "k8s.io/kubernetes/cmd/$b" "k8s.io/kubernetes $K8S_VERSION" "${K8S_LDFLAGS[@]}"
done

# ---- KWOK ----------------------------------------------------------------------------
for b in kwok kwokctl; do
  build "$b" "$TOOLS/kwok" "sigs.k8s.io/kwok/cmd/$b" "sigs.k8s.io/kwok $KWOK_VERSION" \
    "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
done

# KWOK needs Stage objects (what to do with nodes and pods) as a --config file. These are the
# stages kwokctl uses by default, taken from the pinned module, into <dir>/share/kwok-stages.yaml:
# nodes become Ready and keep a heartbeat; pods become Running/Ready, complete, and are deleted.
install_kwok_stages() {
  wanted kwok || return 0
  local out="$DIR/share/kwok-stages.yaml" d f
  [ -s "$out" ] && [ "$FORCE" = 0 ] && return 0
  mkdir -p "$DIR/share"
  d="$(cd "$TOOLS/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok 2>/dev/null)"
  if [ -z "$d" ] || [ ! -d "$d/kustomize/stage" ]; then
    (cd "$TOOLS/kwok" && go mod download sigs.k8s.io/kwok) >/dev/null 2>&1
    d="$(cd "$TOOLS/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok 2>/dev/null)"
  fi
  : > "$out.tmp"
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    if [ ! -f "$d/kustomize/stage/$f" ]; then
      echo "error: $d/kustomize/stage/$f not found" > "$DIR/logs/kwok-stages.log"
      fail kwok-stages "$DIR/logs/kwok-stages.log"; rm -f "$out.tmp"; return 0
    fi
    { echo '---'; cat "$d/kustomize/stage/$f"; } >> "$out.tmp"
  done
  mv -f "$out.tmp" "$out"
  log "wrote $out"
}
install_kwok_stages

# ---- Pulumi --------------------------------------------------------------------------
# The CLI is compiled from a copy of pkg/v3 (hrt_patched_module, scripts/go-build-env.sh; removed
# after the build) without the cloud state and secrets backends: the tests keep their state in
# file:// and the provisioner's postgres:// backends and encrypt with a passphrase, and what is left
# out — s3://, gs:// and azblob:// state, awskms://, azurekeyvault://, gcpkms:// and hashivault://
# secrets, `pulumi logs` of aws and gcp resources — was 496 of the CLI's 1,453 packages, 30 of its
# 77 MB of Go source (docs/toolchain.md, "The Pulumi CLI without the cloud backends"). Asked for
# one, the CLI fails naming it: "the s3:// state backend is not built into this toolchain's CLI;
# docs/toolchain.md". Everything else is upstream's code unchanged.
# lines L...: the L joined by newlines (a Go snippet, an argument a line, $'\t' for gofmt's tabs).
lines() { local IFS=$'\n'; printf '%s' "$*"; }
LEFT_OUT="is not built into this toolchain's CLI; docs/toolchain.md"
# pulumi_stub_logs FUNC WHAT: a file of package operations whose FUNC (upstream's signature) fails.
pulumi_stub_logs() {
  lines 'package operations' '' 'import (' $'\t"context"' $'\t"errors"' '' \
    $'\t"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"' ')' '' \
    "// $1 fails: this toolchain's CLI is built without the cloud SDK it reads the logs with." \
    "func $1(context.Context, map[config.Key]string, *Resource) (Provider, error) {" \
    $'\t'"return nil, errors.New(\"reading the logs of $2 resources $LEFT_OUT\")" '}'
}
if to_build pulumi; then
  PULUMI_SRC_PATCHES=(
    # diy state backends: file:// and postgres:// stay; s3://, gs://, azblob:// fail by name
    # (still recognised as diy URLs, not taken for a Pulumi Cloud address).
    backend/diy/backend.go '"gocloud.dev/blob/azureblob"  // driver for azblob://' ''
    backend/diy/backend.go '"gocloud.dev/blob/gcsblob"    // driver for gs://' ''
    backend/diy/backend.go '_ "gocloud.dev/blob/s3blob"   // driver for s3://' ''
    backend/diy/backend.go '"github.com/pulumi/pulumi/pkg/v3/authhelpers"' ''
    backend/diy/backend.go 'return blob.DefaultURLMux().ValidBucketScheme(u.Scheme)' \
      'return blob.DefaultURLMux().ValidBucketScheme(u.Scheme) || u.Scheme == "s3" || u.Scheme == "gs" || u.Scheme == "azblob"'
    # The gs:// and azblob:// openers' set-up, from its first comment line to the end of the
    # azblob block.
    backend/diy/backend.go "$(lines \
      $'\t// for gcp we want to support additional credentials…azureblob.NewDefaultServiceURLOptions(),' \
      $'\t\t})' \
      $'\t}')" "$(lines \
      $'\tif p.Scheme == "s3" || p.Scheme == "gs" || p.Scheme == "azblob" {' \
      $'\t\treturn nil, fmt.Errorf("the %s:// state backend '"$LEFT_OUT"'", p.Scheme)' \
      $'\t}')"
    # gocloud's S3 copy options, which no driver left in the CLI hands out: a stand-in type.
    backend/diy/bucket.go 'awss3 "github.com/aws/aws-sdk-go-v2/service/s3"' ''
    backend/diy/bucket.go 'var input *awss3.CopyObjectInput' 'var input *s3CopyObjectInput'
    backend/diy/bucket.go 'func fixupS3CopySource(input *awss3.CopyObjectInput) {' "$(lines \
      '// s3CopyObjectInput stands for the S3 SDK'"'"'s CopyObjectInput, which this CLI is built without:' \
      '// no bucket driver it has converts to it, and fixupS3CopySource never runs.' \
      'type s3CopyObjectInput struct{ CopySource *string }' \
      '' \
      'func fixupS3CopySource(input *s3CopyObjectInput) {')"
    # secrets providers: passphrase (and none) stay; the cloud key services fail by name.
    secrets/cloud/manager.go '_ "gocloud.dev/secrets/awskms"        // support for awskms://' ''
    secrets/cloud/manager.go '_ "gocloud.dev/secrets/azurekeyvault" // support for azurekeyvault://' ''
    secrets/cloud/manager.go '"gocloud.dev/secrets/gcpkms"          // support for gcpkms://' ''
    secrets/cloud/manager.go '_ "gocloud.dev/secrets/hashivault"    // support for hashivault://' ''
    secrets/cloud/manager.go '"google.golang.org/api/cloudkms/v1"' ''
    secrets/cloud/manager.go '"github.com/pulumi/pulumi/pkg/v3/authhelpers"' ''
    secrets/cloud/manager.go $'\tcase gcpkms.Scheme:…\t\treturn opener.OpenKeeperURL(ctx, u)' "$(lines \
      $'\tcase "awskms", "azurekeyvault", "gcpkms", "hashivault":' \
      $'\t\treturn nil, fmt.Errorf("the %s:// secrets provider '"$LEFT_OUT"'", u.Scheme)')"
    # `pulumi logs` of aws (CloudWatch) and gcp (Cloud Logging) resources.
    operations/operations_aws.go '' "$(pulumi_stub_logs AWSOperationsProvider aws)"
    operations/operations_gcp.go '' "$(pulumi_stub_logs GCPOperationsProvider gcp)"
    # The "looks like a secret" refusal of `pulumi config set` and `pulumi env set` (a plaintext
    # value under a key named like a password or token): its password-strength estimator, two
    # copies of zxcvbn-go, loads its word lists at every start of the CLI, 93 of the 164 ms of
    # package initialisation that every command pays (the Automation API runs five or six per
    # stack operation). The provisioner and the tests say --secret or --plaintext themselves.
    cmd/pulumi/config/config.go '"github.com/nbutton23/zxcvbn-go"' ''
    cmd/pulumi/config/config.go $'\t// Compute the strength use the resulting entropy…entropyPerChar >= entropyPerCharThreshold)' \
      $'\t// Not checked: this toolchain\'s CLI is built without the password-strength estimator.\n\treturn false'
    cmd/esc/cli/env_set.go '"github.com/ccojocar/zxcvbn-go"' ''
    cmd/esc/cli/env_set.go $'\t// Compute the strength use the resulting entropy…entropyPerChar >= entropyPerCharThreshold)' \
      $'\t// Not checked: this toolchain\'s CLI is built without the password-strength estimator.\n\treturn false'
  )
  if reason="$(hrt_patched_module "$TOOLS/pulumi" github.com/pulumi/pulumi/pkg/v3 "$DIR" \
       "${PULUMI_SRC_PATCHES[@]}" 2>&1)"; then
    MODFILE_ARGS=(-modfile "$DIR/src/go.mod")
    build pulumi "$TOOLS/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
      "github.com/pulumi/pulumi/pkg/v3 $PULUMI_VERSION (without the cloud backends)" \
      "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
    MODFILE_ARGS=()
  else
    printf 'the patched copy of github.com/pulumi/pulumi/pkg/v3: %s\n' "$reason" > "$DIR/logs/pulumi.log"
    fail pulumi "$DIR/logs/pulumi.log"
  fi
  rm -rf "$DIR/src"
elif wanted pulumi; then
  log "pulumi: present"
fi
build pulumi-language-nodejs "$TOOLS/pulumi-language-nodejs" \
  github.com/pulumi/pulumi/sdk/v3/nodejs/cmd/pulumi-language-nodejs \
  "github.com/pulumi/pulumi/sdk/v3 $PULUMI_NODEJS_HOST_VERSION (nodejs/cmd/pulumi-language-nodejs)" \
  "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_NODEJS_HOST_VERSION"

# ---- summary -------------------------------------------------------------------------
total=$(( $(date +%s) - SECONDS_TOTAL_START ))
if [ -s "$FAILED_TMP" ]; then
  mv -f "$FAILED_TMP" "$DIR/FAILED"
  log "done in ${total} s with failures (listed in $DIR/FAILED):"
  sed 's/^/    /' "$DIR/FAILED" >&2
  echo "$BIN"
  exit 1
fi
rm -f "$FAILED_TMP"
log "done in ${total} s: $BIN ($(du -sh "$DIR" | cut -f1) in the cache folder)"
echo "$BIN"

#!/usr/bin/env bash
# Builds pulumi-resource-kubernetes from a pulumi-kubernetes source tree (imported with
# import-source.sh). Called by scripts/toolchain.sh with:
#   PK_SRC     the imported source tree (provider/, sdk/go*, REVISION, CHANGELOG.md)
#   PK_BUILD   a scratch folder in the toolchain cache (wiped here)
#   K8S_TOOLS  tools/kubernetes: its k8s.io/kubernetes module supplies the OpenAPI spec
#   OUT        where to write the binary
#   NICE       niceness for the compiler
#
# Steps, all in PK_BUILD (the source tree and this repository are left untouched):
#  1. The provider embeds schema-embed.json, made from provider/cmd/pulumi-resource-kubernetes/
#     schema.json by `go generate`. schema.json is a large generated file; when the source lacks
#     it, it is regenerated with the repository's own generator (cmd/pulumi-gen-kubernetes,
#     `schema` mode) from the Kubernetes OpenAPI spec (api/openapi-spec/swagger.json) of the
#     k8s.io/kubernetes module that tools/kubernetes pins. The generator would also download
#     older specs (v1.17 … v1.31) to keep removed API versions in the schema; empty stand-ins
#     are given instead, so the schema lists the API versions of that Kubernetes release only.
#     The schema is used by the provider only for GetSchema and for reading resources with no
#     prior inputs (`pulumi import`).
#  2. The provider compiles against the Go SDK in sdk/go (a `replace` to ../sdk). When
#     generated SDK files are missing, sdk/go/kubernetes is regenerated from that schema with
#     the same generator (`go` mode).
#  3. go generate (schema-embed.json, terraform-mapping-embed.json with VERSION), go build.
set -euo pipefail
: "${PK_SRC:?}" "${PK_BUILD:?}" "${K8S_TOOLS:?}" "${OUT:?}"
NICE="${NICE:-15}"
export CGO_ENABLED=0 GOTOOLCHAIN=local

rev="$(head -1 "$PK_SRC/REVISION")"
released="$(sed -n 's/^## \([0-9][0-9.]*\) .*/\1/p' "$PK_SRC/CHANGELOG.md" 2>/dev/null | head -1)"
# Version label: the last release named in the source's CHANGELOG plus the source revision as
# build metadata, e.g. 4.32.0+src.94977969d6 (PULUMI_KUBERNETES_VERSION overrides it).
VERSION="${PULUMI_KUBERNETES_VERSION:-${released:-0.0.0}+src.${rev:0:10}}"
echo "version label: $VERSION"

rm -rf "$PK_BUILD"
mkdir -p "$PK_BUILD"
cp -a "$PK_SRC/." "$PK_BUILD/"
echo "$VERSION" > "$PK_BUILD/VERSION"
cd "$PK_BUILD/provider"
# The build may add go.sum lines for the substitutions below.
export GOFLAGS="-buildvcs=false -mod=mod"

# Modules the provider requires that the Go module proxy refuses (403 "This module version is
# not available"), and what this build uses instead:
#  - github.com/fluxcd/pkg/ssa at an untagged pseudo-version: v0.77.0 instead, a later tag that
#    the proxy serves whole and that requires the same k8s.io/* v0.36.2 as the provider
#    (v0.72.0 and v0.75.0 are refused; v0.74.0 compiles but its .info is refused).
#  - github.com/pulumi/pulumi-dotnet/pulumi-language-dotnet/v3 (all versions): only the
#    generator's .NET SDK output imports it; that function is stubbed out in the build copy.
if grep -q 'github.com/fluxcd/pkg/ssa v0.71.1-0.20260424094917-4f94dc680419' go.mod; then
  go mod edit -require github.com/fluxcd/pkg/ssa@v0.77.0
fi
if grep -q 'pulumi-language-dotnet' go.mod; then
  go mod edit -droprequire github.com/pulumi/pulumi-dotnet/pulumi-language-dotnet/v3
  f=cmd/pulumi-gen-kubernetes/main.go
  awk '
    /pulumi-language-dotnet\/v3\/codegen"/ {next}
    /^func writeDotnetClient\(/ {print; print "\tpanic(\"dotnet SDK generation is not part of this build\")"; print "}"; skip=1; next}
    skip && /^}/ {skip=0; next}
    skip {next}
    {print}' "$f" > "$f.new" && mv "$f.new" "$f"
fi
# No `go mod download` of the whole graph: it asks the proxy for .info files it sometimes
# refuses; go build fetches only the .mod and .zip files of what it compiles.

CMD=cmd/pulumi-resource-kubernetes
LDFLAGS="-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$VERSION"
gen() {
  if [ ! -x "$PK_BUILD/bin/pulumi-gen-kubernetes" ]; then
    echo "== building pulumi-gen-kubernetes"
    nice -n "$NICE" go build -trimpath -ldflags "$LDFLAGS" -o "$PK_BUILD/bin/pulumi-gen-kubernetes" ./cmd/pulumi-gen-kubernetes
  fi
  "$PK_BUILD/bin/pulumi-gen-kubernetes" "$@"
}

if [ ! -s "$CMD/schema.json" ]; then
  swagger_dir="$PK_BUILD/openapi"
  mkdir -p "$swagger_dir"
  k8s_dir="$(cd "$K8S_TOOLS" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  if [ -z "$k8s_dir" ] || [ ! -d "$k8s_dir" ]; then
    (cd "$K8S_TOOLS" && GOFLAGS=-mod=readonly go mod download k8s.io/kubernetes)
    k8s_dir="$(cd "$K8S_TOOLS" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  fi
  cp "$k8s_dir/api/openapi-spec/swagger.json" "$swagger_dir/swagger.json"
  for v in 17 18 19 20 26 28 30 31; do echo '{}' > "$swagger_dir/swagger-v1.$v.0.json"; done
  echo "== schema.json missing: generating it from $(basename "$k8s_dir")'s OpenAPI spec"
  cp "$CMD/terraform-mapping.json" "$PK_BUILD/terraform-mapping.json.keep"
  # `schema` mode writes schema.json, then derives terraform-mapping.json from terraform.json,
  # which partial sources lack; the mapping shipped in the source is kept in that case.
  gen schema "$swagger_dir/swagger.json" "$PK_BUILD" || true
  cp "$PK_BUILD/terraform-mapping.json.keep" "$CMD/terraform-mapping.json"
  [ -s "$CMD/schema.json" ] || { echo "error: schema generation did not write $CMD/schema.json"; exit 1; }
  echo "schema.json: $(stat -c %s "$CMD/schema.json") bytes"
fi

# Missing generated Go SDK files (large files a partial clone leaves out)?
# The import lists how many files it could not copy; a work-tree copy has none missing.
if [ ! -f "$PK_BUILD/sdk/go/kubernetes/core/v1/pulumiTypes.go" ] || \
   { grep -q 'skipped_files=' "$PK_SRC/REVISION" && ! grep -q 'skipped_files=0' "$PK_SRC/REVISION"; }; then
  echo "== regenerating sdk/go/kubernetes from schema.json"
  rm -rf "$PK_BUILD/sdk/go/kubernetes"
  gen -version="$VERSION" go "$CMD/schema.json" "$PK_BUILD"
fi

echo "== go generate ($CMD)"
(cd "$CMD" && VERSION="$VERSION" go run generate.go)
echo "== go build"
nice -n "$NICE" go build -trimpath -ldflags "-s -w $LDFLAGS" -o "$OUT" "./$CMD"
"$OUT" -version 2>/dev/null || true
echo "built $OUT ($VERSION)"

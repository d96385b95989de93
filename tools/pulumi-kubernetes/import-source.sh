#!/usr/bin/env bash
# Copies the parts of a github.com/pulumi/pulumi-kubernetes checkout (a work tree or a bare
# git directory) that the provider build needs into the toolchain cache, outside the
# repository:  ${TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/toolchain}/sources/pulumi-kubernetes
#
#   bash tools/pulumi-kubernetes/import-source.sh <checkout-or-git-dir> [revision]
#
# Why: the Go module proxy refuses github.com/pulumi/pulumi-kubernetes/* at every version, so
# scripts/toolchain.sh builds pulumi-resource-kubernetes from this copy (tools/pulumi-kubernetes/build.sh).
# Files whose content the git directory lacks (partial clones leave large generated files out:
# schema.json, terraform.json, some generated Go SDK files) are skipped; build.sh regenerates
# what the build needs. The copied source is never committed to this repository.
set -euo pipefail
SRC="${1:?usage: import-source.sh <checkout-or-git-dir> [revision]}"
REV="${2:-HEAD}"
CACHE_ROOT="${TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/toolchain}"
DEST="${PULUMI_KUBERNETES_SRC:-$CACHE_ROOT/sources/pulumi-kubernetes}"
PATHS=(provider sdk/go.mod sdk/go.sum sdk/go)

if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1 && git -C "$SRC" rev-parse --verify -q "$REV^{commit}" >/dev/null; then
  commit="$(git -C "$SRC" rev-parse "$REV^{commit}")"
  tmp="$(mktemp -d "${DEST%/*}/.import.XXXXXX" 2>/dev/null || { mkdir -p "${DEST%/*}"; mktemp -d "${DEST%/*}/.import.XXXXXX"; })"
  missing=0
  # Listing with sizes marks blobs the git directory does not hold; write the rest one by one.
  while IFS=$'\t' read -r meta path; do
    set -- $meta   # mode type object size
    if [ "$4" = "-" ] || ! git -C "$SRC" cat-file -e "$3" 2>/dev/null; then
      echo "import-source: skipping $path (content not in $SRC)" >&2
      missing=$((missing + 1)); continue
    fi
    mkdir -p "$tmp/$(dirname "$path")"
    if [ "$1" = 120000 ]; then ln -s "$(git -C "$SRC" cat-file blob "$3")" "$tmp/$path"; continue; fi
    git -C "$SRC" cat-file blob "$3" > "$tmp/$path"
    [ "$1" = 100755 ] && chmod +x "$tmp/$path"
  done < <(git -C "$SRC" ls-tree -r -l "$commit" -- "${PATHS[@]}" 2>/dev/null | awk -F'\t' '{print $1"\t"$2}')
  date="$(git -C "$SRC" show -s --format=%cs "$commit")"
  printf '%s\n%s\n' "$commit" "date=$date skipped_files=$missing" > "$tmp/REVISION"
  git -C "$SRC" show "$commit:CHANGELOG.md" > "$tmp/CHANGELOG.md" 2>/dev/null || true
elif [ -f "$SRC/provider/go.mod" ]; then
  tmp="$(mkdir -p "${DEST%/*}" && mktemp -d "${DEST%/*}/.import.XXXXXX")"
  for p in "${PATHS[@]}" CHANGELOG.md; do
    [ -e "$SRC/$p" ] || continue
    mkdir -p "$tmp/$(dirname "$p")"; cp -a "$SRC/$p" "$tmp/$p"
  done
  rev="tree-$(cd "$SRC" && find provider sdk/go -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
  printf '%s\n%s\n' "$rev" "copied from a work tree" > "$tmp/REVISION"
else
  echo "import-source: $SRC is neither a git directory with $REV nor a pulumi-kubernetes work tree" >&2
  exit 1
fi
rm -rf "$DEST"
mv "$tmp" "$DEST"
echo "import-source: $(head -1 "$DEST/REVISION") -> $DEST" >&2
echo "$DEST"

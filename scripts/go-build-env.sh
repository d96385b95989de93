# Sourced (never executed) by the scripts that build Go binaries from the modules pinned in tools/:
# scripts/toolchain.sh, chart-tools.sh, argocd.sh, argo-workflows.sh, argo-rollouts.sh, vcluster.sh
# and kubernetes-provider.sh. The build environment they share (docs/toolchain.md, "A cold run is
# CPU-bound"):
#   GOTOOLCHAIN=local          the tools modules pin everything: never resolve a different Go toolchain
#   -mod=readonly              tools/*/go.mod and go.sum are the pins; a build never edits them
#   -buildvcs=false            the builds run in module folders, not in a checkout
#   -gcflags=all=-dwarf=false  every binary is linked with -s -w (no symbol table, no DWARF), which
#                              throws away the DWARF the compiler writes for each package; not
#                              writing it costs nothing and saves a little: kwok cold, 274 CPU-s
#                              instead of 281, peak memory of a compile 753 MB instead of 956
#                              (docs/toolchain.md, "A cold run is CPU-bound")
# CGO_ENABLED is each script's own (off everywhere but kine, whose SQLite is C).
export GOTOOLCHAIN=local
export GOFLAGS="-mod=readonly -buildvcs=false -gcflags=all=-dwarf=false"

# hrt_patched_module MOD PKG DIR FILE FROM TO [FILE FROM TO]...: the copy of module PKG (at the
# version MOD's go.mod requires) that a build compiles when a few lines of it have to change — a
# listen address on every interface that the tests need on loopback, say (a Go -overlay cannot
# replace files in the module cache). Copies the module into DIR/src/<PKG with / as _>, replaces
# each fixed string FROM by its TO in its FILE, and writes DIR/src/go.mod (MOD's go.mod with a
# `replace` of PKG to the copy) and go.sum: build with `-modfile DIR/src/go.mod` from MOD. A FROM
# may span lines; a FROM `START…END` (an ellipsis, U+2026, between) stands for the text from START
# to the first END after it, so that a block is named by its first and last lines; an empty FROM
# makes TO the whole of FILE (a file whose imports the build leaves out becomes a stub, or its
# bare `package` clause). Returns 1, with the reason on stderr, when
# the module cannot be downloaded, a FILE is not in it or a FROM is not in its FILE (a new
# upstream version moved it). The caller removes DIR/src after the build. Used by
# scripts/argo-workflows.sh, scripts/argo-rollouts.sh and scripts/toolchain.sh (the Pulumi CLI).
hrt_patched_module() {
  local mod="$1" pkg="$2" dir="$3" src copy file from to
  shift 3
  src="$(cd "$mod" && go mod download -json "$pkg" 2>/dev/null | sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')"
  if [ -z "$src" ] || [ ! -d "$src" ]; then
    echo "go mod download $pkg gave no folder" >&2
    return 1
  fi
  copy="$dir/src/${pkg//\//_}"
  rm -rf "$dir/src"
  mkdir -p "$dir/src"
  cp -r "$src" "$copy" && chmod -R u+w "$copy" || return 1
  while [ $# -ge 3 ]; do
    file="$1" from="$2" to="$3"
    shift 3
    if [ ! -f "$copy/$file" ]; then
      echo "the file to change ($file) is not in $src" >&2
      return 1
    fi
    if [ -z "$from" ]; then
      printf '%s\n' "$to" > "$copy/$file" || return 1
      continue
    fi
    # The file as one string (-0777, $/ undefined), so that a FROM may span lines. FROM is
    # START…END or a fixed string (then START is all of it and END empty).
    local start="${from%%…*}" end=""
    [ "$start" = "$from" ] || end="${from#*…}"
    if ! START="$start" END="$end" perl -0777 -ne 'exit((length $ENV{END} ? /\Q$ENV{START}\E.*?\Q$ENV{END}\E/s : index($_, $ENV{START}) >= 0) ? 0 : 1)' "$copy/$file"; then
      echo "the text to change (${from%%$'\n'*}) was not found in $src/$file" >&2
      return 1
    fi
    if [ -n "$end" ]; then
      START="$start" END="$end" TO="$to" perl -0777 -pi -e 's/\Q$ENV{START}\E.*?\Q$ENV{END}\E/$ENV{TO}/s' "$copy/$file" || return 1
    else
      FROM="$from" TO="$to" perl -0777 -pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/g' "$copy/$file" || return 1
    fi
    TO="$to" perl -e 'local $/; exit(index(<STDIN> // "", $ENV{TO}) < 0 ? 1 : 0)' < "$copy/$file" || return 1
  done
  cp "$mod/go.mod" "$mod/go.sum" "$dir/src/"
  printf '\nreplace %s => %s\n' "$pkg" "$copy" >> "$dir/src/go.mod"
}

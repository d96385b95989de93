# Sourced (never executed) by the scripts that build Go binaries from the modules pinned in tools/:
# scripts/toolchain.sh, chart-tools.sh, argocd.sh, vcluster.sh and kubernetes-provider.sh. The build
# environment they share (docs/toolchain.md, "A cold run is CPU-bound"):
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

#!/usr/bin/env bash
# `npm run bench`: runs every benchmark in bench/ (or the ones named: `npm run bench -- api`).
# Each prints its numbers as ratios against a baseline measured in the same run; results are
# recorded by hand in docs/benchmarks.md with the machine and date.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/node-env.sh"
cd "$ROOT"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  mapfile -t files < <(ls bench/*.bench.ts)
else
  files=(); for n in "${names[@]}"; do files+=("bench/$n.bench.ts"); done
fi
for f in "${files[@]}"; do
  echo "== $f"
  node --expose-gc "$f"
done

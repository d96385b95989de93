#!/usr/bin/env bash
# `npm run sandbox`: a local root cluster with the provisioner, a demo tenant followed to Ready, the
# console URL and an operator key (docs/operations.md, "Local sandbox"). Builds or reuses what it
# needs the way the end-to-end tier does (test/e2e/prepare.sh: the toolchain of scripts/toolchain.sh,
# the chart mirror, the Kubernetes provider plugin), builds the console when its sources changed,
# then runs sandbox/main.ts. Ctrl-C stops everything it started.
set -euo pipefail
SANDBOX_STARTED_MS="$(date +%s%3N)"
export SANDBOX_STARTED_MS
source "$(dirname "${BASH_SOURCE[0]}")/node-env.sh"

elapsed() { echo "$(( ($(date +%s%3N) - SANDBOX_STARTED_MS) / 100 ))" | sed -E 's/([0-9])$/.\1/; s/^\./0./'; }
step_started=0
step() { step_started="$(date +%s%3N)"; echo "sandbox: … $1"; }
done_step() {
  local d=$(( ($(date +%s%3N) - step_started) / 100 ))
  echo "sandbox: ✓ $1 ($(echo "$d" | sed -E 's/([0-9])$/.\1/; s/^\./0./') s; $(elapsed) s)"
}

step "toolchain, chart mirror and Kubernetes provider plugin (test/e2e/prepare.sh; a cold build takes long, docs/toolchain.md)"
set +eu
# Sourced in this shell (it exports what it found); its lines indented under this step.
HRT_PREPARE_FOR=sandbox source "$ROOT/test/e2e/prepare.sh" > >(sed -u 's/^/sandbox:   /') 2>&1
rc=$?
set -eu
if [ "$rc" != 0 ]; then
  echo "sandbox: cannot start: test/e2e/prepare.sh stopped (its reason is printed above)" >&2
  exit 1
fi
done_step "toolchain $HRT_TOOLCHAIN_BIN, provider plugin $HRT_KUBERNETES_PROVIDER"

step "console (scripts/build-console.ts; a no-op when its sources did not change)"
node "$ROOT/scripts/build-console.ts" >/dev/null
done_step "console"

exec node "$ROOT/sandbox/main.ts"

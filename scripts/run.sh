#!/usr/bin/env bash
# `npm start` / `bash scripts/run.sh serve`: the provisioner CLI with the project's Node.js.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/node-env.sh"
# `npm start` serves the ops console too: build it when its sources changed (a no-op otherwise).
[ "${1:-}" != serve ] || node "$ROOT/scripts/build-console.ts"
exec node "$ROOT/bin/provisioner.ts" "$@"

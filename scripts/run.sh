#!/usr/bin/env bash
# `npm start` / `bash scripts/run.sh serve`: the provisioner CLI with the project's Node.js.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/node-env.sh"
exec node "$ROOT/bin/provisioner.ts" "$@"

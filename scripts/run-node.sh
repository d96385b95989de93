#!/usr/bin/env bash
# Runs a command with the project's Node.js first on PATH and dependencies installed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/node-env.sh"
exec "$@"

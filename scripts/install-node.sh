#!/usr/bin/env bash
# Installs a Node.js from the registry's `node` package into DIR (scripts/node-env.sh: the project's
# .tools/node), for systems whose Node is older than the project needs: `install-node.sh DIR [SPEC]`.
# The package's preinstall script fetches the binary for this platform; DIR's package.json approves
# it by name (npm 11.16+ lists every dependency install script not covered by `allowScripts` after
# the install, a warning a newcomer cannot act on, and later npm versions skip such scripts).
set -euo pipefail
dir="${1:?usage: install-node.sh DIR [SPEC]}"
spec="${2:-node@24}"
mkdir -p "$dir"
cat >"$dir/package.json" <<'JSON'
{
  "private": true,
  "description": "The project's Node.js when the system's is too old (scripts/node-env.sh)",
  "allowScripts": { "node": true }
}
JSON
npm install --prefix "$dir" --no-audit --no-fund --no-save "$spec" >&2

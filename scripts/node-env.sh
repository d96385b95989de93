#!/usr/bin/env bash
# Sourced by every project script: puts a Node.js >= 22.19 (Node 24 LTS preferred) first on PATH
# and installs the project's dependencies when package-lock.json changed since the last install.
# The system Node is never touched; a private Node lives in .tools/node when the system one is older.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_SPEC="${PROJECT_NODE_SPEC:-node@24}"
TOOLS="$ROOT/.tools/node"

# `node --version` answers before Node.js boots its JavaScript: this check costs milliseconds on
# every command (the `provisioner` launcher runs it for each call), where `node -e` cost ~60 ms.
node_ok() {
  local v major minor
  v="$(node --version 2>/dev/null)" || return 1
  v="${v#v}" major="${v%%.*}" minor="${v#*.}"
  minor="${minor%%.*}"
  [ "$major" -gt 22 ] 2>/dev/null || { [ "$major" -eq 22 ] && [ "$minor" -ge 19 ]; } 2>/dev/null
}

if [ -x "$TOOLS/node_modules/.bin/node" ]; then
  export PATH="$TOOLS/node_modules/.bin:$PATH"
fi
if ! node_ok; then
  echo "node-env: system Node $(node --version 2>/dev/null || echo missing) is older than 22.19; installing $NODE_SPEC into .tools/node" >&2
  bash "$ROOT/scripts/install-node.sh" "$TOOLS" "$NODE_SPEC"
  export PATH="$TOOLS/node_modules/.bin:$PATH"
  node_ok || { echo "node-env: could not provide Node >= 22.19" >&2; exit 1; }
fi

stamp="$ROOT/node_modules/.install-stamp"
if [ ! -f "$stamp" ] || ! cmp -s "$ROOT/package-lock.json" "$stamp"; then
  echo "node-env: installing dependencies (npm ci) with Node $(node --version)" >&2
  (cd "$ROOT" && npm ci --no-audit --no-fund >&2)
  cp "$ROOT/package-lock.json" "$stamp"
fi
export PATH="$ROOT/node_modules/.bin:$PATH"

# Node.js's compile cache for every Node process a script starts (tests, tap, the sandbox, their
# children): the type-stripped TypeScript and V8's code for each module, kept per file, so that only
# the first process to load a module compiles it (docs/benchmarks.md, "Start-up"). The folder is the
# one bin/provisioner.ts uses; NODE_DISABLE_COMPILE_CACHE=1 turns it off.
if [ -z "${NODE_DISABLE_COMPILE_CACHE:-}" ]; then
  export NODE_COMPILE_CACHE="${NODE_COMPILE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes/node-compile-cache}"
fi

# tap compiles its plugin set at install time; .taprc turns the ts-node plugin off (Node strips
# types itself), so rebuild tap whenever a fresh install brought the default set back.
if grep -q '@tapjs/typescript' "$ROOT/node_modules/@tapjs/test/test-built/dist/esm/index.js" 2>/dev/null; then
  (cd "$ROOT" && tap build >&2)
fi

#!/usr/bin/env bash
# API fuzzing: Schemathesis against a real provisioner (`provisioner serve`, embedded PostgreSQL,
# PROVISIONER_ENGINE=none) on loopback, from its own OpenAPI document (/docs/json), with every
# check, in three modes: an admin key, a tenant key, no key. A mode fails on any server error or
# any answer that disagrees with the document; the seed is printed so a run can be replayed:
#   FUZZ_SEED=<seed> bash scripts/fuzz.sh [admin|tenant|public ...]
# Schemathesis comes from PyPI, pinned, into a venv in the user cache (outside the repository),
# installed once per version; it needs python3 with venv (Debian: python3-venv).
# Settings: FUZZ_EXAMPLES (cases per operation and phase, default 10), FUZZ_MAX_TIME (seconds
# per mode; default 90 for the admin key, whose requests reach the database, and 45 for the others), FUZZ_MIN_CASES (fewer cases in all modes together fail the run, default
# 1000; while fewer were made, more admin runs with new seeds follow, at most FUZZ_EXTRA_ROUNDS,
# default 4), FUZZ_SEED (default: random). Configuration: test/fuzz/schemathesis.toml.
# The last line is `fuzz checks: N passed, N failed` (one check per run and one for the number of
# cases), which scripts/test.sh counts. Exit status 2: the fuzzer could not be set up.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/node-env.sh"
set +e
cd "$ROOT"

SCHEMATHESIS_VERSION=4.32.5
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/hosted-runtimes"
VENV="$CACHE/venv-schemathesis-$SCHEMATHESIS_VERSION"
EXAMPLES="${FUZZ_EXAMPLES:-10}"
MAX_TIME="${FUZZ_MAX_TIME:-}"
MIN_CASES="${FUZZ_MIN_CASES:-1000}"
SEED="${FUZZ_SEED:-$(( (RANDOM << 15) | RANDOM ))}"
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(admin tenant public)

fail_setup() { echo "fuzz: $*" >&2; echo "fuzz checks: 0 passed, $(( ${#modes[@]} + 1 )) failed"; exit 2; }

# --- Schemathesis in its own venv; `.complete` marks an install that finished.
if [ ! -f "$VENV/.complete" ]; then
  command -v python3 >/dev/null || fail_setup "python3 is required (Debian: apt-get install python3 python3-venv)"
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "fuzz: python3 cannot create a venv with pip; installing python3-venv" >&2
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; } >&2 \
        || fail_setup "could not install python3-venv"
    else
      fail_setup "python3 cannot create a venv with pip: install python3-venv (sudo apt-get install python3-venv)"
    fi
  fi
  started=$(date +%s)
  echo "fuzz: installing schemathesis $SCHEMATHESIS_VERSION into $VENV" >&2
  rm -rf "$VENV" && mkdir -p "$CACHE"
  if ! { python3 -m venv "$VENV" &&
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"; } >&2; then
    rm -rf "$VENV"
    fail_setup "could not install schemathesis $SCHEMATHESIS_VERSION"
  fi
  touch "$VENV/.complete"
  echo "fuzz: schemathesis installed in $(( $(date +%s) - started )) s" >&2
fi

# --- A provisioner on loopback, with its own embedded PostgreSQL in a temporary data dir.
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
base="http://127.0.0.1:$port"
admin_key="hrt_admin_$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
env -u DATABASE_URL HOST=127.0.0.1 PORT="$port" PROVISIONER_ENGINE=none PROVISIONER_DATA_DIR="$work/data" \
  PROVISIONER_ADMIN_TOKEN="$admin_key" PROVISIONER_SIGNUP_RATE_LIMIT=100000 LOG_LEVEL=warn \
  node bin/provisioner.ts serve >"$work/server.log" 2>&1 &
server=$!
cleanup() {
  kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null
  # FUZZ_OUT_DIR keeps Schemathesis' output of each mode and the server's log.
  [ -z "${FUZZ_OUT_DIR:-}" ] || { mkdir -p "$FUZZ_OUT_DIR" && cp "$work"/*.out "$work/server.log" "$FUZZ_OUT_DIR"/ 2>/dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT

up=0
for _ in $(seq 1 240); do
  kill -0 "$server" 2>/dev/null || break
  if node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$base/readyz"; then
    up=1; break
  fi
  sleep 0.5
done
if [ "$up" -ne 1 ]; then tail -n 30 "$work/server.log" >&2; fail_setup "the provisioner did not become ready at $base"; fi

# A tenant (signed up through the API) for the tenant key's mode.
tenant_key="$(node -e '
  const res = await fetch(process.argv[1] + "/v1/signup", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ organization: "fuzz-tenant", email: "fuzz@example.com" }),
  });
  if (res.status !== 202) { console.error(res.status, await res.text()); process.exit(1); }
  console.log((await res.json()).apiKey);
' "$base")" || fail_setup "could not sign a tenant up"

# --- Schemathesis, one run per mode.
passed=0
failed=0
total_cases=0
# One Schemathesis run: run_mode MODE SEED [LABEL]; adds to passed/failed and total_cases.
run_mode() {
  local mode="$1" seed="$2" label="${3:-$1}" auth budget started status took cases
  case "$mode" in
    admin) auth=(-H "Authorization: Bearer $admin_key") ;;
    tenant) auth=(-H "Authorization: Bearer $tenant_key") ;;
    public) auth=() ;;
    *) echo "fuzz: unknown mode '$mode' (admin, tenant, public)" >&2; failed=$((failed + 1)); return ;;
  esac
  budget="${MAX_TIME:-$([ "$mode" = admin ] && echo 90 || echo 45)}"
  started=$(date +%s)
  # Run in the scratch directory: Schemathesis keeps a cache (.schemathesis/) where it runs.
  (cd "$work" && "$VENV/bin/schemathesis" --config-file "$ROOT/test/fuzz/schemathesis.toml" run "$base/docs/json" \
    ${auth[@]+"${auth[@]}"} --checks all --seed "$seed" --max-examples "$EXAMPLES" --max-time "$budget" \
    --no-color ${FUZZ_EXTRA_ARGS:-}) >"$work/$label.out" 2>&1
  status=$?
  took=$(( $(date +%s) - started ))
  cases="$(grep -oE '[0-9]+ generated' "$work/$label.out" | tail -1 | grep -oE '[0-9]+')"
  cases=${cases:-0}
  total_cases=$((total_cases + cases))
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    echo "fuzz: $label: passed, $cases cases in $took s (budget $budget s)"
  else
    failed=$((failed + 1))
    cat "$work/$label.out"
    echo "fuzz: $label: FAILED ($cases cases in $took s); replay with FUZZ_SEED=$seed bash scripts/fuzz.sh $mode"
  fi
}
echo "fuzz: schemathesis $SCHEMATHESIS_VERSION against $base/docs/json, seed $SEED, $EXAMPLES examples per operation"
for mode in "${modes[@]}"; do run_mode "$mode" "$SEED"; done
# The time budgets bound each run, so a busy machine makes fewer cases in them. Fewer than
# MIN_CASES in all: more admin runs (new seeds; their own results count like the others) until
# the total is reached, at most FUZZ_EXTRA_ROUNDS (default 4) of them. The case-count check then
# fails only when the fuzzer cannot make MIN_CASES cases at all.
extra_rounds="${FUZZ_EXTRA_ROUNDS:-4}"
for round in $(seq 1 "$extra_rounds"); do
  [ "$total_cases" -lt "$MIN_CASES" ] || break
  echo "fuzz: $total_cases cases so far, fewer than $MIN_CASES: another admin run ($round of at most $extra_rounds, seed $((SEED + round)))"
  run_mode admin "$((SEED + round))" "admin-extra-$round"
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: server log (last 40 lines):"; tail -n 40 "$work/server.log"
fi
if [ "$total_cases" -ge "$MIN_CASES" ]; then
  passed=$((passed + 1))
  echo "fuzz: $total_cases cases in total (at least $MIN_CASES), seed $SEED"
else
  failed=$((failed + 1))
  echo "fuzz: only $total_cases cases in total, fewer than $MIN_CASES after $extra_rounds more admin runs (FUZZ_MAX_TIME, FUZZ_EXTRA_ROUNDS), seed $SEED"
fi
echo "fuzz checks: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

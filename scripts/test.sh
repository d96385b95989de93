#!/usr/bin/env bash
# `npm test`: type-check, lint, then every test tier (browser, fuzz, unit, integration, e2e), and a final
# line `N passed, N failed, N skipped` counting every tap assertion, one check each for type-check
# and lint, and the fuzzer's checks (scripts/fuzz.sh: one per mode and one for the number of
# cases; skipped tests are counted apart, never as passed).
# `npm test -- unit integration` runs only the named tiers (type-check and lint always run).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/node-env.sh"
# node-env.sh runs with `set -e`; from here on a failing tier must be counted, not end the script
# before the final line.
set +e
cd "$ROOT"

# The machine's CPU over the run (/proc/stat, every process, not only this run's): how much of the
# cores' time was used, which says whether a shorter run needs less CPU or better overlap
# (docs/toolchain.md).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6; exit }' /proc/stat 2>/dev/null; }
cpu_start="$(cpu_ticks)"
machine_cpu_report() {
  local end busy idle hz
  end="$(cpu_ticks)"
  [ -n "$cpu_start" ] && [ -n "$end" ] || return 0
  hz="$(getconf CLK_TCK 2>/dev/null || echo 100)"
  read -r busy idle <<<"$(awk -v s="$cpu_start" -v e="$end" 'BEGIN { split(s, a, " "); split(e, b, " "); print b[1] - a[1], b[2] - a[2] }')"
  [ $((busy + idle)) -gt 0 ] || return 0
  echo "== machine CPU during the run: $((busy / hz)) core-seconds used of $(((busy + idle) / hz)) ($((100 * idle / (busy + idle))) % idle, $(nproc 2>/dev/null || echo '?') cores)"
}

tiers=("$@")
# The browser and fuzz tiers first: they need none of the Go builds, so on a cold machine the chart
# tools, etcd and kube-apiserver (started in the background below) are built while they run,
# instead of the unit and integration tiers waiting for them (126 s and 260 s in a cold run).
[ ${#tiers[@]} -gt 0 ] || tiers=(browser fuzz unit integration e2e)
passed=0
failed=0
skipped=0
failures=()
skipped_names=()
logdir="$(mktemp -d)"

check() { # name, command...
  local name="$1"; shift
  echo "== $name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$name"); fi
}

tap_tier() { # tier
  local tier="$1" files
  mapfile -t files < <(find "test/$tier" -name '*.test.ts' 2>/dev/null | sort)
  if [ ${#files[@]} -eq 0 ]; then echo "== $tier: no tests"; return 0; fi
  echo "== $tier (${#files[@]} files)"
  local out="$logdir/$tier.tap" status
  local t0=$SECONDS
  tap --reporter=tap "${files[@]}" 2>&1 | tee "$out" | grep -Ev '^\s*(ok |# time=|1\.\.)' ; status=${PIPESTATUS[0]}
  tap_count "$tier" "$out" "$status"
  echo "== $tier: $((SECONDS - t0)) s; its slowest files:"
  slowest_files "$out" 5
}

# slowest_files TAP N: the N files of a tier that took longest (tap's top-level result lines).
slowest_files() {
  grep -E '^(not )?ok [0-9]+ - test/.* # time=[0-9.]+ms' "$1" |
    sed -E 's/^(not ok|ok) [0-9]+ - (test\/[^ ]+).* # time=([0-9]+)(\.[0-9]+)?ms.*/\3 \2/' |
    sort -rn | head -n "$2" | awk '{ printf "    %-56s %5.0f s\n", $2, $1 / 1000 }'
}

tap_count() { # name, tap output file, tap's exit code: adds the file's summary to the totals
  local tier="$1" out="$2" status="$3" summary pass fail skip todo
  summary="$(grep -E '^# \{ total: ' "$out" | tail -1)"
  pass="$(sed -nE 's/.*pass: ([0-9]+).*/\1/p' <<<"$summary")"
  fail="$(sed -nE 's/.*fail: ([0-9]+).*/\1/p' <<<"$summary")"
  # skip and todo are counted apart from passes; the summary may hold either, both or neither.
  skip="$(grep -oE 'skip: [0-9]+' <<<"$summary" | grep -oE '[0-9]+' || true)"
  todo="$(grep -oE 'todo: [0-9]+' <<<"$summary" | grep -oE '[0-9]+' || true)"
  pass=${pass:-0}; fail=${fail:-0}; skip=$(( ${skip:-0} + ${todo:-0} ))
  skipped=$((skipped + skip))
  [ "$skip" -eq 0 ] || skipped_names+=("$tier ($skip)")
  if [ "$status" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi
  passed=$((passed + pass)); failed=$((failed + fail))
  [ "$fail" -eq 0 ] || failures+=("$tier")
  echo "== $tier: $pass passed, $fail failed, $skip skipped"
}

fuzz_tier() {
  echo "== fuzz (scripts/fuzz.sh: Schemathesis against a running provisioner)"
  local out="$logdir/fuzz.log" status line pass fail
  bash scripts/fuzz.sh 2>&1 | tee "$out"; status=${PIPESTATUS[0]}
  if [ "$status" -eq 2 ] && [ "${CI:-}" != "true" ]; then
    # Outside CI a machine that cannot set Schemathesis up (no python3-venv, no root) skips the
    # tier, counted and named; in CI that is a failure.
    skipped=$((skipped + 1)); skipped_names+=("fuzz (scripts/fuzz.sh could not set Schemathesis up)")
    return 0
  fi
  line="$(grep -E '^fuzz checks: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)"
  pass="$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$line")"
  fail="$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$line")"
  pass=${pass:-0}; fail=${fail:-0}
  if [ "$status" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi
  passed=$((passed + pass)); failed=$((failed + fail))
  [ "$fail" -eq 0 ] || failures+=("fuzz")
  echo "== fuzz: $pass passed, $fail failed"
}

# The Go builds the tiers need (chart tools; etcd and kube-apiserver; the e2e toolchain, Argo CRDs,
# Argo CD, vcluster and kine, the Kubernetes provider plugin) start now, in the background at low priority and in the
# order the tiers need them (scripts/background-builds.sh), so that on a cold machine they compile
# while type-check, lint and the Node tiers run. Each tier still calls the build script it needs:
# the script waits on its cache key's lock while the background build holds it, then reuses the
# result; warm, every script answers from its cache at once. A background build that failed and
# that its tier could not make good either is printed with its log, and fails the run with CI=true.
builds="$logdir/builds"
bg_pid=""
bg_steps=()
has_tier() { [[ " ${tiers[*]} " == *" $1 "* ]]; }
if command -v go >/dev/null 2>&1; then
  # Not what the caller supplies already (HRT_CHART_TOOLS_BIN, HRT_TOOLCHAIN_BIN).
  { has_tier unit || has_tier integration; } && [ -z "${HRT_CHART_TOOLS_BIN:-}" ] && bg_steps+=(chart-tools)
  has_tier integration && [ -z "${HRT_TOOLCHAIN_BIN:-}" ] && bg_steps+=(api-servers)
  if has_tier e2e; then
    # Argo CD, vcluster and the provider plugin first: the late phase's files all wait for them. The
    # three after them are used by five files only, which wait for them themselves (e2e_tier below).
    bg_steps+=(toolchain argo-crds argocd vcluster kubernetes-provider)
    bg_steps+=(argo-workflows argo-rollouts gitea)
  fi
fi
if [ ${#bg_steps[@]} -gt 0 ]; then
  mkdir -p "$builds"
  # A process group of its own (setsid), so that an early exit stops the compilers too.
  setsid nice -n 10 bash scripts/background-builds.sh "$builds" "${bg_steps[@]}" </dev/null >/dev/null 2>&1 &
  bg_pid=$!
  echo "== background builds: ${bg_steps[*]} (logs: $builds)"
fi
pg_in=""
pg_pid=""
cleanup() {
  local rc=$?
  if [ -n "$bg_pid" ] && kill -0 "$bg_pid" 2>/dev/null; then kill -- -"$bg_pid" 2>/dev/null; wait "$bg_pid" 2>/dev/null; fi
  # Closing its stdin stops the test PostgreSQL (signals would also reach this script's process group).
  if [ -n "$pg_in" ]; then eval "exec ${pg_in}>&-"; wait "$pg_pid" 2>/dev/null; fi
  rm -rf "$logdir"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# bg_used STEP: the tier that needs STEP obtained its result (by waiting for the background build,
# or by building it itself after the background build failed).
bg_used() { [ -z "$bg_pid" ] || : > "$builds/$1.used"; }
# bg_wait STEP...: waits until the background builds of these steps have ended (each writes STEP.rc
# last), so that each build runs, and its CPU is counted, in its own step: a tier that called the
# build script while the step before was still compiling would otherwise race the background script
# for the next build's lock and build it in the foreground (the step's line then says 0 CPU-s). The
# tier's own call of the script then answers from the cache. At once without background builds.
bg_wait() {
  local s
  [ -n "$bg_pid" ] || return 0
  for s in "$@"; do
    [[ " ${bg_steps[*]} " == *" $s "* ]] || continue
    while [ ! -f "$builds/$s.rc" ] && kill -0 "$bg_pid" 2>/dev/null; do sleep 2; done
  done
}
# bg_log STEP: prints the background build's reason when it failed (once).
bg_log() {
  local s="$1" rc
  [ -f "$builds/$s.rc" ] && [ ! -f "$builds/$s.printed" ] || return 0
  rc="$(cat "$builds/$s.rc")"
  [ "$rc" = 0 ] && return 0
  : > "$builds/$s.printed"
  echo "== background build $s failed (exit $rc); its log ($builds/$s.log), last lines:"
  tail -n 25 "$builds/$s.log" | sed 's/^/    /'
}

# The ops console is served from console/dist: build it when its sources changed (a no-op otherwise).
node scripts/build-console.ts || { echo "could not build the console (scripts/build-console.ts)" >&2; echo "0 passed, 1 failed"; exit 1; }

# The browser tier (test/browser: the ops console in Chromium, driven by playwright-core) needs
# Debian's chromium. CI installs it when it is missing (root, or sudo); elsewhere a machine without
# it skips the tier, counted and named.
browser_tier() {
  local chromium="${CHROMIUM_PATH:-/usr/bin/chromium}" sudo=""
  if [ ! -x "$chromium" ]; then
    if [ "${CI:-}" = "true" ]; then
      [ "$(id -u)" = 0 ] || sudo="sudo"
      echo "== browser: installing Debian's chromium (apt-get install -y chromium)"
      local t0=$SECONDS
      if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium; } >"$logdir/chromium.log" 2>&1; then
        tail -20 "$logdir/chromium.log"
        failed=$((failed + 1)); failures+=("browser-prepare"); return 0
      fi
      echo "== browser: chromium installed in $((SECONDS - t0)) s"
    else
      skipped=$((skipped + 1)); skipped_names+=("browser (whole tier: no Chromium at $chromium; apt-get install -y chromium)")
      return 0
    fi
  fi
  tap_tier browser
}

# One embedded PostgreSQL for the whole run (each test file creates its own database on it),
# unless DATABASE_URL points at a server to use instead.
if [ -z "${DATABASE_URL:-}" ] && [ -z "${TEST_PG_URL:-}" ]; then
  coproc PGSERVER { exec node "$ROOT/scripts/test-postgres.ts"; }
  pg_pid=$PGSERVER_PID
  pg_in=${PGSERVER[1]}
  if ! read -r -t 120 TEST_PG_URL <&"${PGSERVER[0]}"; then echo "could not start the test PostgreSQL" >&2; echo "0 passed, 1 failed"; exit 1; fi
  export TEST_PG_URL
fi

# The integration tests that need a real kube-apiserver (test/integration/api/clusters-add.test.ts,
# the hybrid runtimes' install tests, which apply their bundles with kubectl) use the end-to-end
# toolchain's etcd, kube-apiserver and kubectl: built or reused here (scripts/toolchain.sh, cached;
# only those three binaries when cold) and exported as HRT_TOOLCHAIN_BIN. Without Go they
# skip, counted and named in the final line; with CI=true they fail.
integration_toolchain() {
  [ -z "${HRT_TOOLCHAIN_BIN:-}" ] || return 0
  if ! command -v go >/dev/null 2>&1; then
    echo "== integration: Go is not installed; the tests needing a kube-apiserver skip (docs/toolchain.md)"
    return 0
  fi
  local bin t0=$SECONDS
  bin="$(bash scripts/toolchain.sh --only etcd --only kube-apiserver --only kubectl | tail -n 1)"
  if [ -n "$bin" ] && [ -x "$bin/etcd" ] && [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kubectl" ]; then
    export HRT_TOOLCHAIN_BIN="$bin"
    bg_used api-servers
    echo "== integration: toolchain $HRT_TOOLCHAIN_BIN ($((SECONDS - t0)) s)"
  else
    echo "== integration: scripts/toolchain.sh built no etcd/kube-apiserver/kubectl; the tests needing them skip"
    bg_log api-servers
  fi
}

# The unit tier's chart conformance check (test/unit/chart-conformance.test.ts) and the integration
# tier's `runtime render`/`runtime diff` tests render the real charts with helm and evaluate them
# with the Pod Security evaluator: both built or reused here
# (scripts/chart-tools.sh, cached under their own key) and exported as HRT_CHART_TOOLS_BIN.
# Without Go the check skips, counted and named; with CI=true it fails.
chart_tools() {
  [ -z "${HRT_CHART_TOOLS_BIN:-}" ] || return 0
  if ! command -v go >/dev/null 2>&1; then
    echo "== chart tools: Go is not installed; the tests rendering charts skip (docs/toolchain.md)"
    return 0
  fi
  local bin t0=$SECONDS
  bin="$(bash scripts/chart-tools.sh | tail -n 1)"
  if [ -n "$bin" ] && [ -x "$bin/helm" ] && [ -x "$bin/pod-security" ]; then
    export HRT_CHART_TOOLS_BIN="$bin"
    bg_used chart-tools
    echo "== chart tools: $HRT_CHART_TOOLS_BIN ($((SECONDS - t0)) s)"
  else
    echo "== chart tools: scripts/chart-tools.sh built no helm/pod-security; the tests rendering charts skip"
    bg_log chart-tools
  fi
}

# The chart mirror every tier renders or installs from: the shared mirror's charts and the vcluster
# charts it lacks, packaged from their Go modules (scripts/chart-mirror.sh; a second under a warm
# cache, a few seconds of module download cold). Exported as HRT_CHART_MIRROR (the tests' and the
# e2e tier's) and PROVISIONER_CHARTS_DIR (`provisioner runtime render`'s). When it cannot be
# assembled the variables stay as they were and the tests that need a missing chart fail, naming it.
chart_mirror() {
  local out t0=$SECONDS
  if out="$(bash scripts/chart-mirror.sh | tail -n 1)" && [ -n "$out" ]; then
    export HRT_CHART_MIRROR="$out"
    export PROVISIONER_CHARTS_DIR="${PROVISIONER_CHARTS_DIR:-$out}"
    echo "== chart mirror: $HRT_CHART_MIRROR ($((SECONDS - t0)) s; $(sed -n 's/^packaged from Go modules: /packaged from Go modules: /p' "$out/.assembled"))"
  else
    echo "== chart mirror: scripts/chart-mirror.sh could not assemble it (its reason is above)"
  fi
}
chart_mirror

# The ops console's sources (console/src, browser code) have their own tsconfig.
typecheck() { tsc -p tsconfig.json --noEmit && tsc -p console/tsconfig.json --noEmit; }
check typecheck typecheck
# Lint: eslint's rules, then the formatting (prettier, .prettierrc.json; `npm run format` rewrites).
lint() { eslint --max-warnings 0 . && prettier --check --log-level warn '**/*.{ts,js,cjs,mjs}'; }
check lint lint
# The end-to-end tier runs in two phases. The early phase is every file that starts neither a whole
# environment nor Argo CD (it names none of provisioningSuite, startE2E, provisioningUnavailable,
# startArgoCd, argoCdUnavailable): the managed-cluster, Argo CRD, event reporter, app-proxy, watch
# scale, engine backend and run lock files, which need only the toolchain and the Argo CRDs. It
# starts as soon as those are built, so on a cold machine it runs while Argo CD, vcluster and the
# provider plugin are still compiling instead of after them; with HRT_E2E_PHASE=early, a file that
# asks for a provisioning environment or Argo CD fails (it was put in the wrong phase) instead of
# skipping. The late phase (every other file) starts when Argo CD, vcluster and the provider plugin
# are built and the early phase has ended, so that at most two files run at once, as the run lock's
# slots expect (docs/e2e.md). The Argo Workflows and Rollouts controllers and Gitea, which only five
# files use, keep building beside it: those files wait for their build themselves
# (test/e2e/harness/background-build.ts; HRT_E2E_DEFERRED_BUILDS). The late files start longest
# first (E2E_LONGEST_FIRST: the file times of the clean-clone run of 2026-11-30, 522 s down to
# 75 s, then the files of the builds built last), so that the phase does not end with one long
# file running alone; a file not listed starts after these.
E2E_LONGEST_FIRST=(hosted-runtime fleet-upgrade crash infra lifecycle warm-pool drift-watch promotions drift
  change-history sandbox hybrid-source-server argocd-reporting managed-cluster-secret hybrid-existing-argo
  argocd argo-workflows argo-rollouts gitea-promotions gitea-pull-requests)
e2e_tier() {
  [ -f test/e2e/prepare.sh ] || return 0
  local all early=() late=() first=() rest=() f n t0=$SECONDS early_pid="" early_status=0 early_out="$logdir/e2e-early.tap"
  mapfile -t all < <(find test/e2e -name '*.test.ts' | sort)
  for f in "${all[@]}"; do
    if grep -qE 'provisioningSuite|startE2E|provisioningUnavailable|startArgoCd|argoCdUnavailable|argoWorkflowsUnavailable|argoRolloutsUnavailable|giteaUnavailable' "$f"; then
      late+=("$f")
    else
      early+=("$f")
    fi
  done
  for n in "${E2E_LONGEST_FIRST[@]}"; do
    for f in "${late[@]}"; do [ "$f" = "test/e2e/$n.test.ts" ] && first+=("$f"); done
  done
  for f in "${late[@]}"; do [[ " ${first[*]} " == *" $f "* ]] || rest+=("$f"); done
  late=("${first[@]}" "${rest[@]}")
  # The builds the late phase leaves to the files that use them (only with background builds).
  local deferred=()
  for s in argo-workflows argo-rollouts gitea; do [[ " ${bg_steps[*]} " == *" $s "* ]] && deferred+=("$s"); done
  if [ ${#deferred[@]} -gt 0 ]; then
    export HRT_E2E_BUILDS_DIR="$builds" HRT_E2E_DEFERRED_BUILDS="${deferred[*]}"
  fi
  bg_wait toolchain argo-crds
  if ! e2e_prepare early; then return 0; fi
  # Each file's CPU (its process and every child it reaped), printed beside its wall time.
  export HRT_E2E_CPU_FILE="$logdir/e2e-cpu.jsonl"
  local node_options_before="${NODE_OPTIONS:-}"
  export NODE_OPTIONS="--import=$ROOT/test/e2e/harness/cpu-record.ts${NODE_OPTIONS:+ $NODE_OPTIONS}"
  echo "== e2e early phase (${#early[@]} files, prepared in $((SECONDS - t0)) s): ${early[*]#test/e2e/}"
  HRT_E2E_PHASE=early tap --reporter=tap "${early[@]}" > "$early_out" 2>&1 &
  early_pid=$!
  bg_wait argocd vcluster kubernetes-provider
  if e2e_prepare; then
    echo "== e2e: prepared in $((SECONDS - t0)) s${deferred[*]:+ (still building, waited for by the files that use them: ${deferred[*]})}"
    for s in toolchain argo-crds argocd vcluster kubernetes-provider; do bg_used "$s"; done
  else
    late=()
  fi
  wait "$early_pid"; early_status=$?
  grep -Ev '^\s*(ok |# time=|1\.\.)' "$early_out"
  tap_count "e2e early phase" "$early_out" "$early_status"
  e2e_file_times "$early_out"
  e2e_timings "$early_out"
  echo "== e2e: early phase ended $((SECONDS - t0)) s after the tier started"
  [ ${#late[@]} -gt 0 ] || return 0
  echo "== e2e late phase (${#late[@]} files, in this order): ${late[*]#test/e2e/}"
  local out="$logdir/e2e.tap" status
  tap_in_order "$out" "${late[@]}"; status=$?
  tap_count "e2e late phase" "$out" "$status"
  e2e_file_times "$out"
  e2e_timings "$out"
  echo "== e2e: both phases ended $((SECONDS - t0)) s after the tier started"
  e2e_cpu_total
  if [ -n "$node_options_before" ]; then export NODE_OPTIONS="$node_options_before"; else unset NODE_OPTIONS; fi
}

# tap_in_order OUT FILE...: runs the test files two at a time (tap's `jobs`) in the order given,
# which one tap run does not keep (it sorts the files it is given), each file in a tap run of its
# own; prints each file's lines but its passes when it ends, and writes the outputs to OUT in the
# given order followed by one summary line adding theirs up (for tap_count). Non-zero when a file
# failed.
tap_in_order() {
  local out="$1" dir f i=0 rc=0 sum
  shift
  dir="$(mktemp -d "$logdir/in-order.XXXXXX")"
  for f in "$@"; do printf '%03d %s\n' "$i" "$f"; i=$((i + 1)); done |
    xargs -P 2 -L 1 bash -c 'tap --reporter=tap "$2" > "$0/$1.tap" 2>&1; echo $? > "$0/$1.rc"
      grep -Ev "^\s*(ok |# time=|1\.\.)|^(TAP version|# No coverage|# \{ total: )" "$0/$1.tap"' "$dir"
  : > "$out"
  for f in "$dir"/*.tap; do
    [ -e "$f" ] || continue
    cat "$f" >> "$out"
    [ "$(cat "${f%.tap}.rc" 2>/dev/null)" = 0 ] || rc=1
  done
  # A file whose tap run left no exit code (xargs stopped) counts as failed.
  [ "$#" -eq "$(find "$dir" -name '*.rc' | wc -l)" ] || rc=1
  sum="$(for f in "$dir"/*.tap; do grep -E '^# \{ total: ' "$f" | tail -1; done |
    awk '{ for (i = 1; i <= NF; i++) { k = $i; sub(/:$/, "", k); if (k ~ /^(total|pass|fail|skip|todo)$/) { v = $(i + 1); sub(/[^0-9].*/, "", v); n[k] += v } } }
      END { printf "# { total: %d, pass: %d, fail: %d, skip: %d, todo: %d }", n["total"], n["pass"], n["fail"], n["skip"], n["todo"] }')"
  echo "$sum" >> "$out"
  return "$rc"
}

# e2e_file_times TAP: each file's wall time, from tap's top-level result lines, and its CPU (its
# process and the children it reaped: test/e2e/harness/cpu-record.ts) where recorded: where the
# tier's time goes (docs/toolchain.md).
e2e_file_times() {
  grep -E '^(not )?ok [0-9]+ - test/e2e/.* # time=[0-9.]+ms' "$1" |
    sed -E 's/^(not ok|ok) [0-9]+ - (test\/e2e\/[^ ]+).* # time=([0-9]+)(\.[0-9]+)?ms.*/\3 \2 \1/' |
    while read -r ms file status; do
      local cpu=""
      if [ -f "${HRT_E2E_CPU_FILE:-}" ]; then
        cpu="$(grep -F "\"file\":\"$file\"" "$HRT_E2E_CPU_FILE" | tail -1 |
          sed -nE 's/.*"selfCpuSeconds":([0-9]+),"childrenCpuSeconds":([0-9]+).*/\1 \2/p' |
          awk '{ printf "  CPU %5d s", $1 + $2 }')"
      fi
      awk -v ms="$ms" -v f="$file" -v st="$status" -v cpu="$cpu" \
        'BEGIN { printf "    %-48s %5.0f s%s%s\n", f, ms / 1000, cpu, (st ~ /^not/ ? " (failed)" : "") }'
    done
}

# e2e_timings TAP: the durations the files measured (their `timing: <what> = <n> s` comments, e2e.timing
# in test/e2e/harness/environment.ts), which docs/benchmarks.md quotes: printed so a CI log keeps them.
e2e_timings() {
  local lines
  lines="$(grep -hE '^ *# timing: ' "$1" | sed -E 's/^ *# timing: /    /')" || true
  [ -z "$lines" ] && return 0
  echo "== e2e timings:"
  printf '%s\n' "$lines"
}

# e2e_cpu_total: the CPU every recorded e2e file used, in all.
e2e_cpu_total() {
  [ -f "${HRT_E2E_CPU_FILE:-}" ] || return 0
  sed -nE 's/.*"selfCpuSeconds":([0-9]+),"childrenCpuSeconds":([0-9]+).*/\1 \2/p' "$HRT_E2E_CPU_FILE" |
    awk '{ s += $1 + $2; n++ } END { if (n) printf "== e2e: %d files used %d CPU-s (their processes and the children they reaped)\n", n, s }'
}

# e2e_prepare [early]: sources test/e2e/prepare.sh (HRT_PREPARE_FOR=early: only the toolchain and the
# Argo CRDs). Non-zero when the tier cannot run; the reason is counted as a failure with CI=true,
# and as a skipped tier otherwise.
e2e_prepare() {
  local s
  if HRT_PREPARE_FOR="${1:-}" source test/e2e/prepare.sh; then return 0; fi
  for s in toolchain argo-crds argocd argo-workflows argo-rollouts vcluster kubernetes-provider gitea; do bg_log "$s"; done
  if [ "${CI:-}" = "true" ]; then
    failed=$((failed + 1)); failures+=("e2e-prepare")
  else
    # Outside CI a machine without the toolchain skips the tier; it is counted and named, never
    # silently left out of the total.
    skipped=$((skipped + 1)); skipped_names+=("e2e (test/e2e/prepare.sh could not prepare it)")
  fi
  return 1
}

for tier in "${tiers[@]}"; do
  case "$tier" in
    e2e) e2e_tier ;;
    fuzz) fuzz_tier ;;
    unit) chart_tools; tap_tier unit ;;
    integration) integration_toolchain; chart_tools; tap_tier integration ;;
    browser) browser_tier ;;
    *) tap_tier "$tier" ;;
  esac
done

# Every step was waited for by its tier; this only collects the exit codes and prints the times.
if [ -n "$bg_pid" ]; then
  wait "$bg_pid" 2>/dev/null
  echo "== background builds (step, wall time, CPU time, exit code):"
  sed 's/^/    /' "$builds/steps.log" 2>/dev/null
  for s in "${bg_steps[@]}"; do
    if [ ! -f "$builds/$s.rc" ]; then rc=none; else rc="$(cat "$builds/$s.rc")"; fi
    [ "$rc" = 0 ] && continue
    # A failed background build its tier then built itself (the script retries what is missing)
    # is reported but counts as nothing; one no tier could make good fails the run with CI=true.
    bg_log "$s"
    [ "$rc" = none ] && echo "== background build $s did not finish"
    if [ -f "$builds/$s.used" ]; then
      echo "== background build $s failed, but its tier's own call of the script then succeeded"
    elif [ "${CI:-}" = "true" ]; then
      failed=$((failed + 1)); failures+=("build-$s")
    fi
  done
fi
machine_cpu_report
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}"
[ ${#skipped_names[@]} -eq 0 ] || echo "skipped: ${skipped_names[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

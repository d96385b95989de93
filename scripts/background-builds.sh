#!/usr/bin/env bash
# Runs the named build steps one after another, for scripts/test.sh to start in the background at
# the beginning of a run, so that a cold machine compiles the Go toolchain while type-check, lint
# and the Node tiers run (they mostly wait on PostgreSQL, sockets and timers):
#
#     bash scripts/background-builds.sh DIR STEP...
#
# Steps, in the order the tiers need them (scripts/test.sh passes only those its tiers need):
#   chart-tools      scripts/chart-tools.sh                                   (unit, integration)
#   api-servers      scripts/toolchain.sh --only etcd --only kube-apiserver --only kubectl (integration)
#   toolchain        scripts/toolchain.sh --only each binary the e2e tier uses (e2e; the same
#                    list test/e2e/prepare.sh asks for: kwokctl and etcdctl are for people and
#                    tools/smoke.sh; pulumi-language-nodejs runs infra's program; kubectl applies
#                    the hybrid runtimes' bundles)
#   argo-crds        scripts/argo-crds.sh                                     (e2e)
#   argocd           scripts/argocd.sh                                        (e2e)
#   vcluster         scripts/vcluster.sh                                      (e2e)
#   kubernetes-provider  scripts/kubernetes-provider.sh                       (e2e)
#   argo-workflows   scripts/argo-workflows.sh   (e2e: the five files that use these three wait
#   argo-rollouts    scripts/argo-rollouts.sh     for them themselves, beside the late phase:
#   gitea            scripts/gitea.sh             test/e2e/harness/background-build.ts)
#
# For each step: DIR/STEP.out (the script's stdout: its last line is the folder it built),
# DIR/STEP.log (its stderr: progress, and the reason when it failed) and, when it has finished,
# DIR/STEP.rc (its exit code; written last, by rename). DIR/steps.log gets one line per step with
# its wall time and CPU time (user + system, of every process it ran). A failed step does not stop the next ones.
#
# The tiers still call the same scripts when they need a result: every script serialises builds
# of one cache key on a lock file, so a call made while this build runs waits for it and then
# reuses what it built, and a call made once it is done answers from the cache in well under a
# second. The integration tier's `--only etcd --only kube-apiserver --only kubectl` is a step of its own, before
# the e2e toolchain step, so it never waits for pulumi or the controllers.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:?usage: background-builds.sh DIR STEP...}"
shift
mkdir -p "$DIR"

command_for() { # step -> the command, one word per line
  case "$1" in
    chart-tools) printf '%s\n' "$ROOT/scripts/chart-tools.sh" ;;
    api-servers) printf '%s\n' "$ROOT/scripts/toolchain.sh" --only etcd --only kube-apiserver --only kubectl ;;
    toolchain) printf '%s\n' "$ROOT/scripts/toolchain.sh" --only etcd --only kube-apiserver --only kubectl --only kube-controller-manager \
      --only kube-scheduler --only kwok --only pulumi --only pulumi-language-nodejs ;;
    argo-crds) printf '%s\n' "$ROOT/scripts/argo-crds.sh" ;;
    argocd) printf '%s\n' "$ROOT/scripts/argocd.sh" ;;
    argo-workflows) printf '%s\n' "$ROOT/scripts/argo-workflows.sh" ;;
    argo-rollouts) printf '%s\n' "$ROOT/scripts/argo-rollouts.sh" ;;
    vcluster) printf '%s\n' "$ROOT/scripts/vcluster.sh" ;;
    kubernetes-provider) printf '%s\n' "$ROOT/scripts/kubernetes-provider.sh" ;;
    gitea) printf '%s\n' "$ROOT/scripts/gitea.sh" ;;
    *) return 1 ;;
  esac
}

TIMEFORMAT='%U %S'
cpu_of() { # file with bash's `time` output (TIMEFORMAT above) -> "N CPU-s" (user + system)
  awk 'NF == 2 { printf "%d CPU-s (%d user + %d system)", $1 + $2 + 0.5, $1 + 0.5, $2 + 0.5; exit }' "$1" 2>/dev/null
}

modules_for() { # step -> the tools module folders it builds from, one per line
  case "$1" in
    chart-tools) printf '%s\n' chart-tools/helm chart-tools/pod-security ;;
    api-servers) printf '%s\n' etcd kubernetes ;;
    toolchain) printf '%s\n' etcd kubernetes kwok pulumi pulumi-language-nodejs ;;
    vcluster) (cd "$ROOT/tools" && printf '%s\n' vcluster-* kine) ;;
    kubernetes-provider) printf '%s\n' pulumi-kubernetes ;;
    argocd) printf '%s\n' argocd ;;
    argo-workflows) printf '%s\n' argo-workflows ;;
    argo-rollouts) printf '%s\n' argo-rollouts ;;
    gitea) printf '%s\n' gitea ;;
  esac
}

# Every step's Go modules are downloaded first, in a process of their own beside the builds, in the
# steps' order: on a cold machine the downloads (several GB, network-bound) then happen while the
# first builds compile, instead of each later build waiting on the network in turn when it starts.
# A build that finds a module missing downloads it itself (the module cache locks each module), so
# a failed download here costs nothing but time; DIR/modules.log has its output.
(
  start=$(date +%s)
  # shellcheck source=scripts/go-build-env.sh
  source "$ROOT/scripts/go-build-env.sh"
  rc=0
  { time for m in $(for step in "$@"; do modules_for "$step"; done | awk '!seen[$0]++'); do
    echo "== tools/$m" >> "$DIR/modules.log"
    (cd "$ROOT/tools/$m" && go mod download) >> "$DIR/modules.log" 2>&1 || rc=$?
  done; } 2> "$DIR/modules.cpu"
  printf '%s\t%s s\t%s\texit %s\n' "modules (downloads, beside the builds)" "$(( $(date +%s) - start ))" "$(cpu_of "$DIR/modules.cpu")" "$rc" >> "$DIR/steps.log"
) &

for step in "$@"; do
  mapfile -t cmd < <(command_for "$step")
  if [ ${#cmd[@]} -eq 0 ]; then
    echo "background-builds: unknown step $step" > "$DIR/$step.log"
    echo 2 > "$DIR/$step.rc"
    continue
  fi
  start=$(date +%s)
  # bash's `time` reports the CPU of the step's whole process tree (every compiler it waited for).
  { time bash "${cmd[@]}" > "$DIR/$step.out" 2> "$DIR/$step.log"; } 2> "$DIR/$step.cpu"
  rc=$?
  printf '%s\t%s s\t%s\texit %s\n' "$step" "$(( $(date +%s) - start ))" "$(cpu_of "$DIR/$step.cpu")" "$rc" >> "$DIR/steps.log"
  echo "$rc" > "$DIR/$step.rc.tmp" && mv -f "$DIR/$step.rc.tmp" "$DIR/$step.rc"
done
wait

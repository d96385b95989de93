#!/usr/bin/env bash
# A container of a runtime pod (one that vcluster synced into a tenant namespace of the root
# cluster) for a machine without a kubelet: sandbox/runtime-pods.ts starts it inside the pod's own
# network namespace (`ip netns exec`) and a private mount namespace (`unshare -m --propagation
# private`), so the paths its volumes mount at, its /etc/hosts and the ports it listens on are the
# pod's alone:
#
#     runtime-pod.sh POD_DIR UID GID WORKDIR COMMAND [ARG...]
#
# POD_DIR/mounts has one line per mount: SOURCE<TAB>TARGET<TAB>ro|rw, SOURCE relative to POD_DIR
# (which is bound at /run/hrt-pod first, so a volume mounted at /tmp cannot hide the pod's folder
# when that is itself under /tmp) — the pod's volumes as
# the runner wrote them (Secrets, ConfigMaps, the projected service-account token, emptyDirs) at
# the container's mountPaths, and the pod's hosts and resolv.conf files at /etc/hosts and
# /etc/resolv.conf. Mount points that do not exist are made as empty folders (or files) on the
# machine's own file system, once. Then the container's command starts in WORKDIR as UID:GID (the
# pod's runAsUser and runAsGroup) with no capabilities, with the environment it was given.
set -euo pipefail
pod=$1 uid=$2 gid=$3 workdir=$4
shift 4

mkdir -p /run/hrt-pod
mount --bind "$pod" /run/hrt-pod
# HRT_POD_BIN: a folder of programs the image has on its PATH (Argo CD's one binary, which its
# repo-server also runs as git's askpass helper), bound at /run/hrt-pod/bin so that the pod's user
# reaches it wherever the build lives.
if [ -n "${HRT_POD_BIN:-}" ]; then
  mkdir -p /run/hrt-pod/bin
  mount --bind "$HRT_POD_BIN" /run/hrt-pod/bin
  mount -o remount,bind,ro /run/hrt-pod/bin
fi
unset HRT_POD_BIN
while IFS=$'\t' read -r rel dst mode; do
  [ -n "$rel" ] || continue
  src=/run/hrt-pod/$rel
  if [ -d "$src" ]; then
    if [ -e "$dst" ] && [ ! -d "$dst" ]; then
      echo "runtime-pod.sh: $dst exists and is not a folder; cannot mount a volume there" >&2
      exit 1
    fi
    mkdir -p "$dst"
  else
    mkdir -p "$(dirname "$dst")"
    [ -e "$dst" ] || : >"$dst"
  fi
  mount --bind "$src" "$dst"
  if [ "$mode" = ro ]; then mount -o remount,bind,ro "$dst"; fi
done </run/hrt-pod/mounts

mkdir -p "$workdir"
cd "$workdir"
exec setpriv --reuid "$uid" --regid "$gid" --clear-groups --inh-caps=-all --bounding-set=-all -- "$@"

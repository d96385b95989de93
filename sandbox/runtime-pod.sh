#!/usr/bin/env bash
# A container of a runtime pod (one that vcluster synced into a tenant namespace of the root
# cluster) for a machine without a kubelet: sandbox/runtime-pods.ts starts it inside the pod's own
# network namespace (`ip netns exec`) and a private mount namespace (`unshare -m --propagation
# private`), so the paths its volumes mount at, its /etc/hosts and the ports it listens on are the
# pod's alone:
#
#     runtime-pod.sh POD_DIR UID GID WORKDIR COMMAND [ARG...]
#
# POD_DIR/nft, when there, is the pod's nftables table (its Service routing), applied in its
# network namespace before anything else, so the container's first connection is routed.
# POD_DIR/fstab lists the pod's mounts in order, as bind mounts in fstab form, all made by one
# `mount --all`: POD_DIR itself at /run/hrt-pod first (the sources below are under it, so a
# volume mounted at /tmp cannot hide the pod's folder when that is itself under /tmp), a folder of
# programs the image has on its PATH (Argo CD's one binary, which its repo-server also runs as
# git's askpass helper) at /run/hrt-pod/bin read-only, then the pod's volumes as the runner wrote
# them (Secrets, ConfigMaps, the projected service-account token, emptyDirs) at the container's
# mountPaths, and the pod's hosts and resolv.conf files at /etc/hosts and /etc/resolv.conf. The
# runner made every mount point (once, on the machine's own file system, or inside the volume
# mounted above it). Then the container's command starts in WORKDIR as UID:GID (the pod's
# runAsUser and runAsGroup) with no capabilities, with the environment it was given; the time it
# does so is left in POD_DIR/exec-at (the runner's start timings). Builtins only, but for `nft`,
# `mount` and `setpriv`: each start is a few processes.
set -euo pipefail
pod=$1 uid=$2 gid=$3 workdir=$4
shift 4

# Loopback addresses may be routed out of eth0 (the DNAT to the control plane's relay).
echo 1 >/proc/sys/net/ipv4/conf/all/route_localnet
if [ -s "$pod/nft" ]; then nft -f "$pod/nft"; fi
mount --all --fstab "$pod/fstab"

[ -d "$workdir" ] || mkdir -p "$workdir"
cd "$workdir"
printf '%s\n' "$EPOCHREALTIME" >/run/hrt-pod/exec-at
exec setpriv --reuid "$uid" --regid "$gid" --clear-groups --inh-caps=-all --bounding-set=-all -- "$@"

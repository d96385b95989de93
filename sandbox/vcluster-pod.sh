#!/usr/bin/env bash
# The container of a vcluster pod, as the vcluster chart's StatefulSet describes it, for a machine
# without a kubelet (sandbox/vcluster-pods.ts starts it). Runs inside the pod's own network
# namespace (`ip netns exec`) and a private mount namespace (`unshare -m --propagation private`),
# so the fixed paths and ports vcluster uses (/data, /binaries, /pki, /var/lib/vcluster, the
# service account files; 6443, 8443, 10257) are the pod's alone:
#
#     vcluster-pod.sh POD_DIR VCLUSTER_DIR KUBERNETES_BIN_DIR KINE UID
#
# POD_DIR holds one folder per volume of the chart's pod: data (the PersistentVolumeClaim),
# pki, tmp, config (the config Secret at /var/lib/vcluster), serviceaccount (the projected token,
# ca.crt and namespace). VCLUSTER_DIR (the vcluster binary of the release's version) is mounted at
# /usr/local/bin, where the vcluster image has it. /binaries is the volume the chart's `kubernetes`
# init container fills from the k8s distro image (its /kubernetes/: the control plane binaries and,
# from vcluster 0.33, kine): an empty tmpfs here, holding each file of KUBERNETES_BIN_DIR and the
# KINE binary, bound read-only (single files, so kine can sit beside binaries of another folder).
# Then the container starts as UID:UID (the chart's runAsUser and runAsGroup), with no
# capabilities: `vcluster start`, the image's command.
set -euo pipefail
pod=$1 vcbin=$2 kubebin=$3 kine=$4 uid=$5

# /tmp last: the pod's folder may itself be under /tmp.
mounts=(
  "$pod/data:/data"
  "$pod/pki:/pki"
  "$pod/config:/var/lib/vcluster"
  "$pod/serviceaccount:/var/run/secrets/kubernetes.io/serviceaccount"
  "$vcbin:/usr/local/bin"
  "$pod/tmp:/tmp"
)
for m in "${mounts[@]}"; do
  src=${m%%:*} dst=${m#*:}
  # The mount points are empty folders on the machine's own file system (created once).
  mkdir -p "$dst"
  mount --bind "$src" "$dst"
done
mkdir -p /binaries
mount -t tmpfs -o mode=755,size=1m binaries /binaries
for f in "$kubebin"/* "$kine"; do
  [ -f "$f" ] || continue
  : > "/binaries/${f##*/}"
  mount --bind "$f" "/binaries/${f##*/}"
  mount -o remount,bind,ro "/binaries/${f##*/}"
done
mount -o remount,ro /binaries
mount -o remount,bind,ro /usr/local/bin
mount -o remount,bind,ro /var/lib/vcluster
mount -o remount,bind,ro /var/run/secrets/kubernetes.io/serviceaccount
cd /
exec setpriv --reuid "$uid" --regid "$uid" --clear-groups --inh-caps=-all --bounding-set=-all \
  /usr/local/bin/vcluster start --config /var/lib/vcluster/config.yaml

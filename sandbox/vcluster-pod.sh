#!/usr/bin/env bash
# The container of a vcluster pod, as the vcluster chart's StatefulSet describes it, for a machine
# without a kubelet (sandbox/vcluster-pods.ts starts it). Runs inside the pod's own network
# namespace (`ip netns exec`) and a private mount namespace (`unshare -m --propagation private`),
# so the fixed paths and ports vcluster uses (/data, /binaries, /pki, /var/lib/vcluster, the
# service account files; 6443, 8443, 10257) are the pod's alone:
#
#     vcluster-pod.sh POD_DIR VCLUSTER_BIN_DIR KUBERNETES_BIN_DIR UID
#
# POD_DIR holds one folder per volume of the chart's pod: data (the PersistentVolumeClaim),
# pki, tmp, config (the config Secret at /var/lib/vcluster), serviceaccount (the projected token,
# ca.crt and namespace). VCLUSTER_BIN_DIR (vcluster and kine) is mounted at /usr/local/bin, where
# the vcluster image has kine; KUBERNETES_BIN_DIR at /binaries, where the chart's init container
# copies the Kubernetes binaries. Then the container starts as UID:UID (the chart's runAsUser and
# runAsGroup), with no capabilities: `vcluster start`, the image's command.
set -euo pipefail
pod=$1 vcbin=$2 kubebin=$3 uid=$4

# /tmp last: the pod's folder may itself be under /tmp.
mounts=(
  "$pod/data:/data"
  "$pod/pki:/pki"
  "$pod/config:/var/lib/vcluster"
  "$pod/serviceaccount:/var/run/secrets/kubernetes.io/serviceaccount"
  "$vcbin:/usr/local/bin"
  "$kubebin:/binaries"
  "$pod/tmp:/tmp"
)
for m in "${mounts[@]}"; do
  src=${m%%:*} dst=${m#*:}
  # The mount points are empty folders on the machine's own file system (created once).
  mkdir -p "$dst"
  mount --bind "$src" "$dst"
done
mount -o remount,bind,ro /binaries
mount -o remount,bind,ro /var/lib/vcluster
mount -o remount,bind,ro /var/run/secrets/kubernetes.io/serviceaccount
cd /
exec setpriv --reuid "$uid" --regid "$uid" --clear-groups --inh-caps=-all --bounding-set=-all \
  /usr/local/bin/vcluster start --config /var/lib/vcluster/config.yaml

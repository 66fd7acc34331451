#!/bin/bash
# A worker: wait for the control plane, then join it with the lab's fixed token.
#
#   worker.sh NODE_IP CONTROL_PLANE_IP TOKEN
set -euo pipefail

node_ip=$1
control_plane=$2
token=$3

if [ -f /etc/kubernetes/kubelet.conf ]; then
    echo "already joined"
    exit 0
fi

# With the libvirt provider the machines come up in parallel.
echo "== waiting for the API server at $control_plane:6443"
for _ in $(seq 1 180); do
    if curl -ksf --max-time 5 "https://${control_plane}:6443/readyz" >/dev/null; then
        break
    fi
    sleep 5
done

echo "== kubeadm join ($node_ip)"
# The lab's token is fixed and the CA is not pinned: a throw-away cluster on a private network.
for attempt in 1 2 3 4 5 6; do
    if kubeadm join "${control_plane}:6443" --token="$token" \
        --discovery-token-unsafe-skip-ca-verification; then
        exit 0
    fi
    echo "join attempt $attempt failed; retrying in 20 s"
    kubeadm reset --force >/dev/null 2>&1 || true
    sleep 20
done
exit 1

#!/bin/bash
# The control plane: kubeadm init without kube-proxy, kube-proxy-ipvs from /src/deploy (before
# the CNI: flannel reaches the API server through the kubernetes Service, which only the
# agent makes answer), then flannel on the private network.
#
#   control-plane.sh NODE_IP POD_CIDR TOKEN NET
set -euo pipefail

node_ip=$1
pod_cidr=$2
token=$3
net=$4
flannel=${FLANNEL_MANIFEST:-https://github.com/flannel-io/flannel/releases/latest/download/kube-flannel.yml}
export KUBECONFIG=/etc/kubernetes/admin.conf

if [ ! -f /etc/kubernetes/admin.conf ]; then
    echo "== kubeadm init (no kube-proxy)"
    kubeadm init \
        --apiserver-advertise-address="$node_ip" \
        --pod-network-cidr="$pod_cidr" \
        --token="$token" --token-ttl=0 \
        --skip-phases=addon/kube-proxy
fi

# kubectl for the vagrant user too (smoke-test.sh runs it over vagrant ssh).
install -d -o vagrant -g vagrant /home/vagrant/.kube
install -m 0600 -o vagrant -g vagrant /etc/kubernetes/admin.conf /home/vagrant/.kube/config

echo "== kube-proxy-ipvs"
rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT
sed -e "s|CLUSTER_CIDR_PLACEHOLDER|${pod_cidr}|" \
    -e "s|APISERVER_PLACEHOLDER|https://${node_ip}:6443|" \
    /src/deploy/configmap.yaml >"$rendered/configmap.yaml"
kubectl apply -f /src/deploy/rbac.yaml -f "$rendered/configmap.yaml" -f /src/deploy/daemonset.yaml
kubectl -n kube-system rollout status daemonset/kube-proxy-ipvs --timeout=5m

echo "== flannel"
kubectl apply -f "$flannel"
# Flannel picks the interface of the default route, which is the NAT one on every machine:
# make it use the private network instead.
# (The dots match any character; no backslashes, which JSON would need doubled.)
regex="^${net}."
if ! kubectl -n kube-flannel get daemonset kube-flannel-ds -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -q -- '--iface-regex'; then
    kubectl -n kube-flannel patch daemonset kube-flannel-ds --type=json \
        -p "[{\"op\":\"add\",\"path\":\"/spec/template/spec/containers/0/args/-\",\"value\":\"--iface-regex=${regex}\"}]"
fi
kubectl -n kube-flannel rollout status daemonset/kube-flannel-ds --timeout=5m
kubectl wait --for=condition=Ready "node/$(hostname)" --timeout=5m
kubectl get nodes -o wide

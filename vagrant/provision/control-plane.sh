#!/bin/bash
# The control plane. By default: kubeadm init without kube-proxy, kube-proxy-ipvs from
# /src/deploy (before the CNI: flannel reaches the API server through the kubernetes Service,
# which only the agent makes answer), then flannel on the private network. With SWAP
# "iptables" or "nftables": kubeadm's kube-proxy in that mode and flannel first, then
# deploy/swap.sh swaps kube-proxy for the agent, as deploy/README.md tells an operator to.
#
#   control-plane.sh NODE_IP POD_CIDR TOKEN NET FLANNEL_VERSION [SWAP]
set -euo pipefail

node_ip=$1
pod_cidr=$2
token=$3
net=$4
flannel_version=$5
swap=${6:-}
flannel=https://github.com/flannel-io/flannel/releases/download/${flannel_version}/kube-flannel.yml
export KUBECONFIG=/etc/kubernetes/admin.conf

if [ ! -f /etc/kubernetes/admin.conf ]; then
    if [ -n "$swap" ]; then
        echo "== kubeadm init (kube-proxy in $swap mode, to be swapped)"
        cat >/root/kubeadm.yaml <<YAML
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint: {advertiseAddress: "${node_ip}"}
bootstrapTokens: [{token: "${token}", ttl: "0s"}]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
networking: {podSubnet: "${pod_cidr}"}
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ${swap}
YAML
        kubeadm init --config=/root/kubeadm.yaml
    else
        echo "== kubeadm init (no kube-proxy)"
        kubeadm init \
            --apiserver-advertise-address="$node_ip" \
            --pod-network-cidr="$pod_cidr" \
            --token="$token" --token-ttl=0 \
            --skip-phases=addon/kube-proxy
    fi
fi

# kubectl for the vagrant user too (smoke-test.sh runs it over vagrant ssh).
install -d -o vagrant -g vagrant /home/vagrant/.kube
install -m 0600 -o vagrant -g vagrant /etc/kubernetes/admin.conf /home/vagrant/.kube/config

agent() {
    echo "== kube-proxy-ipvs"
    if [ -n "$swap" ]; then
        # The operator's road: backup, settings read from kube-proxy's ConfigMap, the image
        # set before the apply (deploy/README.md).
        if kubectl -n kube-system get daemonset kube-proxy >/dev/null 2>&1; then
            /src/deploy/swap.sh to-agent --image localhost/kube-proxy-ipvs:dev --backup /root/kube-proxy-backup
        fi
        return
    fi
    rendered=$(mktemp -d)
    sed -e "s|CLUSTER_CIDR_PLACEHOLDER|${pod_cidr}|" \
        -e "s|APISERVER_PLACEHOLDER|https://${node_ip}:6443|" \
        /src/deploy/configmap.yaml >"$rendered/configmap.yaml"
    kubectl apply -f /src/deploy/rbac.yaml -f "$rendered/configmap.yaml" -f /src/deploy/daemonset.yaml
    rm -rf "$rendered"
    kubectl -n kube-system rollout status daemonset/kube-proxy-ipvs --timeout=5m
}

# Without kube-proxy, the agent first: flannel needs the kubernetes Service.
[ -n "$swap" ] || agent

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
# With kube-proxy, the swap once the cluster runs on it.
[ -z "$swap" ] || agent
kubectl get nodes -o wide

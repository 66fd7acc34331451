#!/bin/bash
# Every node: kernel modules and sysctls, containerd 2, runc and the CNI plugins (pinned
# releases), kubeadm/kubelet/kubectl from pkgs.k8s.io, the stock IPVS tools, and the
# kube-proxy-ipvs image, built here from the sources, in containerd's k8s.io namespace.
#
#   common.sh NODE_IP K8S_VERSION CONTAINERD_VERSION RUNC_VERSION CNI_PLUGINS_VERSION
set -euo pipefail

node_ip=$1
k8s_version=$2
containerd_version=$3
runc_version=$4
cni_version=$5
export DEBIAN_FRONTEND=noninteractive

echo "== kernel modules and sysctls"
# The lab cluster's nodes run the same script (tests/cluster/node-setup.sh); the agent's init
# container loads the IPVS modules too, the node loads them at boot anyway, for kubeadm's
# preflight and for a node whose init container is removed.
bash /src/tests/cluster/node-setup.sh kernel --persist

swapoff -a
sed -i '/\sswap\s/s/^[^#]/#&/' /etc/fstab

echo "== packages"
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    ca-certificates curl gpg apt-transport-https iptables ipset ipvsadm conntrack nftables buildah >/dev/null

# From the projects' releases, pinned and checked against their published checksums:
# containerd 2, which Debian bookworm does not package: the default Kubernetes (v1.33, the
# Vagrantfile's KPI_K8S_VERSION) runs on it, and 1.36 and later support containerd 2 only.
fetch() { # url file: download, and check against url.sha256sum
    curl -fsSL -o "$2" "$1"
    curl -fsSL -o "$2.sha256sum" "$1.sha256sum"
    (cd "$(dirname "$2")" && sed "s|  .*|  $(basename "$2")|" "$(basename "$2").sha256sum" | sha256sum -c --quiet -)
}
work=$(mktemp -d)
echo "== containerd $containerd_version, runc $runc_version, CNI plugins $cni_version"
if ! containerd --version 2>/dev/null | grep -q " v${containerd_version} "; then
    fetch "https://github.com/containerd/containerd/releases/download/v${containerd_version}/containerd-${containerd_version}-linux-amd64.tar.gz" \
        "$work/containerd.tar.gz"
    tar -C /usr/local -xzf "$work/containerd.tar.gz"
    curl -fsSL -o /etc/systemd/system/containerd.service \
        "https://raw.githubusercontent.com/containerd/containerd/v${containerd_version}/containerd.service"
fi
curl -fsSL -o "$work/runc" "https://github.com/opencontainers/runc/releases/download/v${runc_version}/runc.amd64"
curl -fsSL -o "$work/runc.sha256sum" "https://github.com/opencontainers/runc/releases/download/v${runc_version}/runc.sha256sum"
(cd "$work" && grep ' runc.amd64$' runc.sha256sum | sed 's/runc.amd64$/runc/' | sha256sum -c --quiet -)
install -m 0755 "$work/runc" /usr/local/sbin/runc
fetch "https://github.com/containernetworking/plugins/releases/download/v${cni_version}/cni-plugins-linux-amd64-v${cni_version}.tgz" \
    "$work/cni.tgz"
install -d /opt/cni/bin
tar -C /opt/cni/bin -xzf "$work/cni.tgz"
rm -rf "$work"

install -d /etc/containerd
# As on the lab cluster's nodes, with systemd's cgroup driver (kubeadm's kubelet default).
bash /src/tests/cluster/node-setup.sh containerd-config --cgroup-driver systemd >/etc/containerd/config.toml
systemctl daemon-reload
systemctl enable --now containerd >/dev/null
systemctl restart containerd

echo "== kubeadm, kubelet, kubectl $k8s_version (pkgs.k8s.io)"
install -d -m 0755 /etc/apt/keyrings
curl -fsSL "https://pkgs.k8s.io/core:/stable:/${k8s_version}/deb/Release.key" |
    gpg --dearmor --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
echo "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/${k8s_version}/deb/ /" \
    >/etc/apt/sources.list.d/kubernetes.list
apt-get update -qq
apt-get install -y -qq kubelet kubeadm kubectl >/dev/null
apt-mark hold kubelet kubeadm kubectl >/dev/null

# The node's address on the private network, not the NAT one every machine shares.
echo "KUBELET_EXTRA_ARGS=--node-ip=${node_ip}" >/etc/default/kubelet
systemctl enable kubelet >/dev/null

echo "== the kube-proxy-ipvs image"
image=localhost/kube-proxy-ipvs:dev
archive=/src/vagrant/.build/kube-proxy-ipvs.tar
if [ ! -f "$archive" ]; then
    # No archive from the host: build the image here from the rsynced sources (the
    # Containerfile compiles the agent in a builder stage; the host needs no toolchain).
    archive=/var/tmp/kube-proxy-ipvs.tar
    # (--network=host: the build's apt-get and cargo use the VM's network, no CNI set-up for
    # buildah.)
    /src/deploy/build-image.sh --tag "$image" --save "$archive" -- --network=host
fi
ctr --namespace k8s.io images import "$archive" >/dev/null
ctr --namespace k8s.io images ls -q | grep -qx "$image"
echo "$image is in containerd"

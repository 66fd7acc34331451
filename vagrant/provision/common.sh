#!/bin/bash
# Every node: kernel modules and sysctls (ip_vs loaded by the node, as the agent expects),
# containerd, kubeadm/kubelet/kubectl from pkgs.k8s.io, the stock IPVS tools, and the
# kube-proxy-ipvs image in containerd's k8s.io namespace.
#
#   common.sh NODE_IP K8S_VERSION
set -euo pipefail

node_ip=$1
k8s_version=$2
export DEBIAN_FRONTEND=noninteractive

echo "== kernel modules and sysctls"
# The agent never loads modules (its container has no SYS_MODULE): the node does, at boot.
cat >/etc/modules-load.d/kube-proxy-ipvs.conf <<'MODULES'
overlay
br_netfilter
nf_conntrack
ip_vs
ip_vs_rr
ip_vs_wrr
ip_vs_sh
MODULES
systemctl restart systemd-modules-load.service
# What kubeadm's preflight wants, and what the agent's init container would write anyway.
cat >/etc/sysctl.d/90-kube-proxy-ipvs.conf <<'SYSCTLS'
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.vs.conntrack = 1
net.ipv4.vs.expire_nodest_conn = 1
net.ipv4.vs.expire_quiescent_template = 1
SYSCTLS
sysctl --quiet --system

swapoff -a
sed -i '/\sswap\s/s/^[^#]/#&/' /etc/fstab

echo "== packages"
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    ca-certificates curl gpg apt-transport-https iptables ipset ipvsadm conntrack buildah >/dev/null

echo "== containerd (Docker's repository, 1.7)"
install -d -m 0755 /etc/apt/keyrings
. /etc/os-release
curl -fsSL "https://download.docker.com/linux/${ID}/gpg" | gpg --dearmor --yes -o /etc/apt/keyrings/docker.gpg
echo "deb [signed-by=/etc/apt/keyrings/docker.gpg] https://download.docker.com/linux/${ID} ${VERSION_CODENAME} stable" \
    >/etc/apt/sources.list.d/docker.list

echo "== kubeadm, kubelet, kubectl $k8s_version (pkgs.k8s.io)"
curl -fsSL "https://pkgs.k8s.io/core:/stable:/${k8s_version}/deb/Release.key" |
    gpg --dearmor --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
echo "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/${k8s_version}/deb/ /" \
    >/etc/apt/sources.list.d/kubernetes.list

apt-get update -qq
apt-get install -y -qq 'containerd.io=1.7.*' kubelet kubeadm kubectl >/dev/null
apt-mark hold containerd.io kubelet kubeadm kubectl >/dev/null

containerd config default >/etc/containerd/config.toml
sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml
grep -q 'SystemdCgroup = true' /etc/containerd/config.toml
systemctl restart containerd
systemctl enable --now containerd >/dev/null

# The node's address on the private network, not the NAT one every machine shares.
echo "KUBELET_EXTRA_ARGS=--node-ip=${node_ip}" >/etc/default/kubelet
systemctl enable kubelet >/dev/null

echo "== the kube-proxy-ipvs image"
image=localhost/kube-proxy-ipvs:dev
archive=/src/vagrant/.build/kube-proxy-ipvs.tar
if [ ! -f "$archive" ]; then
    # No archive from the host: build the image here from the staged binary.
    archive=/var/tmp/kube-proxy-ipvs.tar
    # (--network=host: the build's apt-get uses the VM's network, no CNI set-up for buildah.)
    /src/deploy/build-image.sh --binary /src/vagrant/.build/kube-proxy-ipvs --tag "$image" --save "$archive" \
        -- --network=host
fi
ctr --namespace k8s.io images import "$archive" >/dev/null
ctr --namespace k8s.io images ls -q | grep -qx "$image"
echo "$image is in containerd"

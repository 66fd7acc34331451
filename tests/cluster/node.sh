#!/bin/bash
# One node of the lab cluster, run as the lab VM's payload (`lab run --tap ...`): makes the
# VM a Kubernetes node (cgroup2, the mounts kubelet and containerd need on an initramfs
# root, the node's address on the shared bridge, routes to the other nodes' pods), starts
# containerd 2.x with runc and the CNI bridge plugin (or, with flannel, the directory its
# DaemonSet fills) on the image store built on the host, and starts kubelet against the API
# server on the host. Then it stays up until the host ends
# the VM, printing one line per state change (the serial console is slow: no logs here).
#
# The kernel set-up and containerd's configuration are tests/cluster/node-setup.sh's, which
# the vagrant cluster's nodes run too.
#
#   node.sh NAME IP POD_SUBNET BIN_DIR CONF_DIR [OTHER_POD_SUBNET=VIA ...]
#
#   NAME              the node's name (kubelet --hostname-override)
#   IP                its address on the lab bridge (a /24 whose .1 is the host)
#   POD_SUBNET        this node's pods, e.g. 10.244.1.0/24, for the bridge plugin; or
#                     `flannel`: flannel's DaemonSet writes the CNI configuration and copies
#                     its plugin to /opt/cni/bin, and routes the other nodes' pods (VXLAN)
#   BIN_DIR           kubelet, containerd, containerd-shim-runc-v2, ctr, runc, CNI plugins
#   CONF_DIR          kubelet.conf (kubeconfig), kubelet-config.yaml, ca.crt, and
#                     node-store.tar (containerd's store, filled by tests/cluster/node-store.sh)
#   SUBNET=VIA        a route to another node's pods
set -euo pipefail
name=$1 ip=$2 pod_subnet=$3 bin=$4 conf=$5
shift 5
gateway=${ip%.*}.1
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$bin:$PATH"
t0=$(cut -d' ' -f1 /proc/uptime)
say() { echo "node $name: $* ($(cut -d' ' -f1 /proc/uptime)s)"; }

# --- the system kubelet and containerd expect ----------------------------------------------
mkdir -p /sys/fs/cgroup
mount -t cgroup2 none /sys/fs/cgroup
# Every controller for the children of the root (kubelet's kubepods tree).
read -ra controllers </sys/fs/cgroup/cgroup.controllers
for c in "${controllers[@]}"; do
    echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
done
# Pod volumes are mounted with propagation; the initramfs root must be shared.
mount --make-rshared /
# kubelet and containerd stat their filesystems: the initramfs root ("rootfs") cannot be.
for d in /var/lib/kubelet /var/lib/containerd /run/containerd /var/log/pods /etc/cni/net.d; do
    mkdir -p "$d"
    mount -t tmpfs tmpfs "$d"
done
mkdir -p /etc/containerd /opt/cni/bin /var/log
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >/etc/machine-id
hostname "$name"
printf '127.0.0.1 localhost\n%s %s\n' "$ip" "$name" >/etc/hosts
# The host answers DNS on the bridge (CoreDNS, for the cluster and for pods with dnsPolicy Default).
printf 'nameserver %s\n' "$gateway" >/etc/resolv.conf
bash "$here/node-setup.sh" kernel
sysctl -qw kernel.panic_on_oops=1 vm.overcommit_memory=1

# --- the network: eth0 on the host's bridge ------------------------------------------------
ip addr flush dev eth0
ip addr add "$ip/24" dev eth0
ip link set eth0 up
ip route add default via "$gateway"
for r in "$@"; do
    ip route add "${r%=*}" via "${r#*=}"
done

# --- containerd ----------------------------------------------------------------------------
cni_bins=(--cni-bin "$bin")
[[ $pod_subnet != flannel ]] || cni_bins+=(--cni-bin /opt/cni/bin)
bash "$here/node-setup.sh" containerd-config --cgroup-driver cgroupfs --runc "$bin/runc" \
    "${cni_bins[@]}" --sandbox-image registry.k8s.io/pause:3.10.2 --no-pivot-root \
    >/etc/containerd/config.toml
[[ $pod_subnet == flannel ]] || cat >/etc/cni/net.d/10-lab.conflist <<EOF
{
  "cniVersion": "1.0.0",
  "name": "lab",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$pod_subnet" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
# The image store made on the host (tests/cluster/node-store.sh): nothing is pulled or imported.
tar -C /var/lib/containerd --numeric-owner --xattrs --xattrs-include='trusted.*' -xpf "$conf/node-store.tar"
# The tarball lies in the initramfs, in memory: unpacked, it is only a second copy.
rm -f "$conf/node-store.tar"
containerd --config /etc/containerd/config.toml >/var/log/containerd.log 2>&1 &
for _ in $(seq 120); do
    [[ -S /run/containerd/containerd.sock ]] && ctr version >/dev/null 2>&1 && break
    sleep 0.5
done
ctr version >/dev/null || { tail -20 /var/log/containerd.log; exit 1; }
say "containerd up"
say "images: $(ctr -n k8s.io images ls -q | grep -vc '^sha256:')"

# --- kubelet -------------------------------------------------------------------------------
kubelet --config="$conf/kubelet-config.yaml" --kubeconfig="$conf/kubelet.conf" \
    --hostname-override="$name" --node-ip="$ip" --v=2 >/var/log/kubelet.log 2>&1 &
kubelet_pid=$!
say "kubelet started (script began at ${t0}s; $(awk '/^MemAvailable/ {print int($2 / 1024)}' /proc/meminfo) MiB available)"
# The logs, for the host to read when something fails (http://IP:10080/kubelet.log).
busybox httpd -p 10080 -h /var/log

# --- stay up: report what changes, until the host ends the VM ------------------------------
last=
while kill -0 "$kubelet_pid" 2>/dev/null; do
    now="containers=$(ctr -n k8s.io containers ls -q 2>/dev/null | wc -l)"
    if [[ "$now" != "$last" ]]; then say "$now"; last=$now; fi
    sleep 10
done
say "kubelet exited"
tail -30 /var/log/kubelet.log
exit 1

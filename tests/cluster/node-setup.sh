#!/bin/bash
# What makes a machine a Kubernetes node for the agent, written once for the lab cluster's
# nodes (tests/cluster/node.sh) and the vagrant cluster's (vagrant/provision/common.sh), so
# that what a user runs in vagrant is what the lab tests:
#
#   node-setup.sh kernel [--persist]
#       loads the modules (overlay for containerd, br_netfilter, nf_conntrack, ip_vs and the
#       common schedulers) and sets the sysctls kubeadm's preflight and the agent want.
#       --persist also writes them to /etc/modules-load.d and /etc/sysctl.d (a systemd
#       machine that reboots); without it they are set for this boot only (the lab VM).
#   node-setup.sh containerd-config --cgroup-driver systemd|cgroupfs [--runc PATH]
#                 [--cni-bin DIR]... [--sandbox-image IMAGE] [--no-pivot-root]
#       prints containerd 2.x's configuration (version 3) for kubelet's CRI: runc with the
#       cgroup driver kubelet uses, the CNI directories (each --cni-bin in order; default
#       /opt/cni/bin), and the lab's extras (runc's path,
#       the pause image the lab builds, and NoPivotRoot: pivot_root(2) fails on the lab's
#       initramfs root; a real node leaves it off).
set -euo pipefail

modules=(overlay br_netfilter nf_conntrack ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh)
sysctls=(
    net.ipv4.ip_forward=1
    net.bridge.bridge-nf-call-iptables=1
    net.bridge.bridge-nf-call-ip6tables=1
    net.ipv4.vs.conntrack=1
    net.ipv4.vs.expire_nodest_conn=1
    net.ipv4.vs.expire_quiescent_template=1
)

kernel() {
    if [[ "${1:-}" == --persist ]]; then
        printf '%s\n' "${modules[@]}" >/etc/modules-load.d/kube-proxy-ipvs.conf
        printf '%s\n' "${sysctls[@]}" | sed 's/=/ = /' >/etc/sysctl.d/90-kube-proxy-ipvs.conf
        systemctl restart systemd-modules-load.service
        sysctl --quiet --system
    else
        modprobe -a "${modules[@]}"
        sysctl -qw "${sysctls[@]}"
    fi
}

containerd_config() {
    local driver='' runc='' sandbox='' no_pivot=false cni_bins=()
    while [[ $# -gt 0 ]]; do
        case $1 in
            --cgroup-driver) driver=$2; shift 2 ;;
            --runc) runc=$2; shift 2 ;;
            --cni-bin) cni_bins+=("$2"); shift 2 ;;
            --sandbox-image) sandbox=$2; shift 2 ;;
            --no-pivot-root) no_pivot=true; shift ;;
            *) echo "node-setup: unknown option $1" >&2; exit 2 ;;
        esac
    done
    case $driver in
        systemd) systemd_cgroup=true ;;
        cgroupfs) systemd_cgroup=false ;;
        *) echo "node-setup: --cgroup-driver is systemd or cgroupfs (kubelet's cgroupDriver)" >&2; exit 2 ;;
    esac
    cat <<EOF
version = 3
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
EOF
    if [[ -n "$sandbox" ]]; then
        printf "  [plugins.'io.containerd.cri.v1.images'.pinned_images]\n    sandbox = \"%s\"\n" "$sandbox"
    fi
    cat <<EOF
[plugins.'io.containerd.cri.v1.runtime']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = $systemd_cgroup
        NoPivotRoot = $no_pivot
EOF
    if [[ -n "$runc" ]]; then printf '        BinaryName = "%s"\n' "$runc"; fi
    [[ ${#cni_bins[@]} -gt 0 ]] || cni_bins=(/opt/cni/bin)
    local dirs
    dirs=$(printf '"%s", ' "${cni_bins[@]}")
    cat <<EOF
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [${dirs%, }]
    conf_dir = "/etc/cni/net.d"
EOF
}

case "${1:-}" in
    kernel) shift; kernel "$@" ;;
    containerd-config) shift; containerd_config "$@" ;;
    *) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac

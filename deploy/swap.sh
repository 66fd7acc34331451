#!/bin/sh
# Swaps a kubeadm cluster's kube-proxy for kube-proxy-ipvs, and back (deploy/README.md).
#
#   deploy/swap.sh to-agent --image IMAGE [--backup DIR] [--cluster-cidr CIDR] [--no-wait]
#   deploy/swap.sh back [--backup DIR] [--no-wait]
#
# to-agent: backs up kube-proxy's DaemonSet and ConfigMap (kubectl get -o yaml, into DIR,
#   default ./kube-proxy-backup; refuses to overwrite a backup), reads the pod network
#   (clusterCIDR) and the API server's address from kube-proxy's ConfigMap, applies the
#   agent's RBAC and ConfigMap with them, deletes kube-proxy's DaemonSet and ConfigMap (so
#   that `kubeadm upgrade` does not bring it back), then applies the agent's DaemonSet with
#   IMAGE in both containers and waits for its rollout. Whatever mode kube-proxy ran in
#   (iptables, nftables, ipvs), the agent removes the other modes' rules when it starts.
# back: deletes the agent's DaemonSet, ConfigMap and RBAC and re-creates kube-proxy's
#   DaemonSet and ConfigMap from the backup, as they were. Going back to iptables or nftables
#   mode, run the agent's cleanup on each node first (deploy/README.md, "Go back").
#
# KUBECTL names the kubectl to run (default: kubectl); it uses the usual KUBECONFIG.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
kubectl=${KUBECTL:-kubectl}
ns=kube-system

usage() {
    sed -n '2,6p' "$0" >&2
    exit 2
}

[ $# -ge 1 ] || usage
verb=$1
shift
image=
backup=./kube-proxy-backup
cluster_cidr=
wait=true
while [ $# -gt 0 ]; do
    case $1 in
        --image) image=${2:?--image IMAGE}; shift 2 ;;
        --backup) backup=${2:?--backup DIR}; shift 2 ;;
        --cluster-cidr) cluster_cidr=${2:?--cluster-cidr CIDR}; shift 2 ;;
        --no-wait) wait=false; shift ;;
        *) usage ;;
    esac
done

# One field of kube-proxy's ConfigMap: data[KEY], then the value of the first "FIELD:" line.
field() { # key field
    "$kubectl" -n "$ns" get configmap kube-proxy -o "jsonpath={.data.$1}" |
        sed -n "s/^[[:space:]]*$2:[[:space:]]*//p" | head -n 1 | tr -d "\"'"
}

to_agent() {
    if [ -z "$image" ]; then
        echo "swap: --image is required: an image every node can pull (deploy/README.md, \"Build the image\")" >&2
        exit 2
    fi
    case $image in localhost/*)
        echo "swap: warning: $image is a local name: every node must have it imported already" >&2 ;;
    esac
    if [ -e "$backup/kube-proxy-daemonset.yaml" ] || [ -e "$backup/kube-proxy-configmap.yaml" ]; then
        echo "swap: $backup already holds a backup of kube-proxy; keeping it, stopping here (remove it to start over)" >&2
        exit 1
    fi
    mkdir -p "$backup"
    # Saved before anything changes; `back` applies them as they are.
    "$kubectl" -n "$ns" get daemonset kube-proxy -o yaml >"$backup/kube-proxy-daemonset.yaml.tmp"
    "$kubectl" -n "$ns" get configmap kube-proxy -o yaml >"$backup/kube-proxy-configmap.yaml.tmp"
    mv "$backup/kube-proxy-daemonset.yaml.tmp" "$backup/kube-proxy-daemonset.yaml"
    mv "$backup/kube-proxy-configmap.yaml.tmp" "$backup/kube-proxy-configmap.yaml"
    echo "swap: kube-proxy's DaemonSet and ConfigMap saved in $backup"

    [ -n "$cluster_cidr" ] || cluster_cidr=$(field 'config\.conf' clusterCIDR)
    server=$(field 'kubeconfig\.conf' server)
    mode=$(field 'config\.conf' mode)
    if [ -z "$server" ]; then
        echo "swap: no server in kube-proxy's kubeconfig.conf: cannot tell the API server's address" >&2
        exit 1
    fi
    if [ -z "$cluster_cidr" ]; then
        echo "swap: warning: kube-proxy has no clusterCIDR; the agent runs without one too (give --cluster-cidr to set it)" >&2
    fi
    echo "swap: kube-proxy mode '${mode:-iptables}', clusterCIDR '${cluster_cidr}', API server $server"

    sed -e "s|CLUSTER_CIDR_PLACEHOLDER|\"${cluster_cidr}\"|" -e "s|APISERVER_PLACEHOLDER|${server}|" \
        "$here/configmap.yaml" | "$kubectl" apply -f - -f "$here/rbac.yaml"

    "$kubectl" -n "$ns" delete daemonset kube-proxy
    "$kubectl" -n "$ns" delete configmap kube-proxy
    sed -e "s|image: localhost/kube-proxy-ipvs:dev|image: ${image}|" "$here/daemonset.yaml" |
        "$kubectl" apply -f -
    if $wait; then
        "$kubectl" -n "$ns" rollout status daemonset/kube-proxy-ipvs --timeout=10m
    fi
}

back() {
    for f in kube-proxy-daemonset.yaml kube-proxy-configmap.yaml; do
        if [ ! -s "$backup/$f" ]; then
            echo "swap: no $backup/$f: nothing to restore kube-proxy from" >&2
            exit 1
        fi
    done
    "$kubectl" -n "$ns" delete daemonset kube-proxy-ipvs --ignore-not-found
    "$kubectl" -n "$ns" delete configmap kube-proxy-ipvs --ignore-not-found
    "$kubectl" delete -f "$here/rbac.yaml" --ignore-not-found
    "$kubectl" apply -f "$backup/kube-proxy-configmap.yaml" -f "$backup/kube-proxy-daemonset.yaml"
    if $wait; then
        "$kubectl" -n "$ns" rollout status daemonset/kube-proxy --timeout=10m
    fi
}

case $verb in
    to-agent) to_agent ;;
    back) back ;;
    *) usage ;;
esac

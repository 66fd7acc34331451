#!/bin/bash
# The swap guide's kubectl commands (deploy/swap.sh, deploy/README.md) against a real
# kube-apiserver (the lab's control plane: etcd and kube-apiserver from tests/peers/build.sh,
# on this host; no nodes, so no pod runs and no rollout is waited for):
#   1. a kubeadm kube-proxy (DaemonSet, and a ConfigMap in iptables mode with a clusterCIDR
#      and the API server's address) is swapped for the agent with an image name: the backup
#      holds both objects, the agent's ConfigMap carries kube-proxy's clusterCIDR and server
#      (and the agent accepts it, when a binary is given), both containers run the image,
#      kube-proxy's objects are gone; a second swap refuses and keeps the backup;
#   2. going back restores kube-proxy's DaemonSet and ConfigMap as they were and removes the
#      agent's objects.
#
#   tests/check-swap.sh [--binary PATH]
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
binary=
[ "${1:-}" = "--binary" ] && binary=${2:-}
tmp=$(mktemp -d)
cp_pid=
cleanup() {
    if [ -n "$cp_pid" ]; then
        # Enter stops the control plane (lab control-plane waits for a line).
        echo >&3 || true
        exec 3>&-
        wait "$cp_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "check-swap: FAIL: $*" >&2
    exit 1
}

cargo build --quiet -p lab
mkfifo "$tmp/in"
target/debug/lab control-plane <"$tmp/in" >"$tmp/cp.log" 2>&1 &
cp_pid=$!
exec 3>"$tmp/in"
# lab control-plane uses target/lab/control-plane under the current directory; wait for it.
dir=$repo/target/lab/control-plane
for _ in $(seq 1 120); do
    grep -q 'press Enter to stop' "$tmp/cp.log" && break
    kill -0 "$cp_pid" 2>/dev/null || { cat "$tmp/cp.log" >&2; fail "the control plane did not start"; }
    sleep 1
done
grep -q 'press Enter to stop' "$tmp/cp.log" || { cat "$tmp/cp.log" >&2; fail "the control plane did not start in 120 s"; }
export KUBECONFIG=$dir/admin-host.kubeconfig
export KUBECTL=$repo/target/peers/kubectl
k() { "$KUBECTL" "$@"; }

# ---- kubeadm's kube-proxy, as `kubeadm init` makes it (shortened to what matters here)
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: kube-proxy
  namespace: kube-system
  labels: {app: kube-proxy}
data:
  config.conf: |-
    apiVersion: kubeproxy.config.k8s.io/v1alpha1
    kind: KubeProxyConfiguration
    bindAddress: 0.0.0.0
    clientConnection:
      kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
    clusterCIDR: 10.32.0.0/12
    mode: ""
  kubeconfig.conf: |-
    apiVersion: v1
    kind: Config
    clusters:
    - cluster:
        certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
        server: https://192.168.56.10:6443
      name: default
    contexts:
    - context: {cluster: default, namespace: default, user: default}
      name: default
    current-context: default
    users:
    - name: default
      user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-proxy
  namespace: kube-system
  labels: {k8s-app: kube-proxy}
spec:
  selector:
    matchLabels: {k8s-app: kube-proxy}
  template:
    metadata:
      labels: {k8s-app: kube-proxy}
    spec:
      priorityClassName: system-node-critical
      serviceAccountName: kube-proxy
      hostNetwork: true
      nodeSelector: {kubernetes.io/os: linux}
      tolerations: [{operator: Exists}]
      containers:
        - name: kube-proxy
          image: registry.k8s.io/kube-proxy:v1.33.0
          command: [/usr/local/bin/kube-proxy, --config=/var/lib/kube-proxy/config.conf, --hostname-override=$(NODE_NAME)]
          env:
            - name: NODE_NAME
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
          securityContext: {privileged: true}
          volumeMounts:
            - {name: kube-proxy, mountPath: /var/lib/kube-proxy}
      volumes:
        - name: kube-proxy
          configMap: {name: kube-proxy}
YAML
before_data=$(k -n kube-system get configmap kube-proxy -o 'jsonpath={.data}')
before_spec=$(k -n kube-system get daemonset kube-proxy -o 'jsonpath={.spec.template}')

# ---- 1. to the agent
image=registry.example.com/kube-proxy-ipvs:0.1.0
backup=$tmp/backup
sh deploy/swap.sh to-agent --image "$image" --backup "$backup" --no-wait >"$tmp/swap.log" 2>&1 ||
    { cat "$tmp/swap.log" >&2; fail "swap.sh to-agent"; }
grep -q 'kind: DaemonSet' "$backup/kube-proxy-daemonset.yaml" || fail "no DaemonSet in the backup"
grep -q 'kind: ConfigMap' "$backup/kube-proxy-configmap.yaml" || fail "no ConfigMap in the backup"
[ -z "$(k -n kube-system get daemonset kube-proxy --ignore-not-found -o name)" ] || fail "kube-proxy's DaemonSet is still there"
[ -z "$(k -n kube-system get configmap kube-proxy --ignore-not-found -o name)" ] || fail "kube-proxy's ConfigMap is still there"
k -n kube-system get configmap kube-proxy-ipvs -o 'jsonpath={.data.config\.conf}' >"$tmp/config.conf"
k -n kube-system get configmap kube-proxy-ipvs -o 'jsonpath={.data.kubeconfig\.conf}' >"$tmp/kubeconfig.conf"
grep -q '^clusterCIDR: "10.32.0.0/12"$' "$tmp/config.conf" || fail "the agent's clusterCIDR is not kube-proxy's: $(grep clusterCIDR "$tmp/config.conf")"
grep -q 'server: https://192.168.56.10:6443$' "$tmp/kubeconfig.conf" || fail "the agent's API server is not kube-proxy's"
images=$(k -n kube-system get daemonset kube-proxy-ipvs -o 'jsonpath={.spec.template.spec.initContainers[*].image} {.spec.template.spec.containers[*].image}')
[ "$images" = "$image $image" ] || fail "the agent's images: $images"
if [ -n "$binary" ]; then
    "$binary" --config "$tmp/config.conf" --hostname-override check-swap --write-config-to "$tmp/effective.yaml" >"$tmp/agent.log" 2>&1 ||
        { cat "$tmp/agent.log" >&2; fail "the agent refuses the swapped ConfigMap"; }
    grep -q '10.32.0.0/12' "$tmp/effective.yaml" || fail "the agent did not read the clusterCIDR"
fi
if sh deploy/swap.sh to-agent --image "$image" --backup "$backup" --no-wait >"$tmp/again.log" 2>&1; then
    fail "a second swap did not refuse"
fi
grep -q 'kind: DaemonSet' "$backup/kube-proxy-daemonset.yaml" || fail "a second swap spoiled the backup"

# ---- 2. and back
sh deploy/swap.sh back --backup "$backup" --no-wait >"$tmp/back.log" 2>&1 ||
    { cat "$tmp/back.log" >&2; fail "swap.sh back"; }
[ -z "$(k -n kube-system get daemonset kube-proxy-ipvs --ignore-not-found -o name)" ] || fail "the agent's DaemonSet is still there"
[ -z "$(k -n kube-system get configmap kube-proxy-ipvs --ignore-not-found -o name)" ] || fail "the agent's ConfigMap is still there"
[ "$(k -n kube-system get configmap kube-proxy -o 'jsonpath={.data}')" = "$before_data" ] || fail "kube-proxy's ConfigMap is not restored as it was"
[ "$(k -n kube-system get daemonset kube-proxy -o 'jsonpath={.spec.template}')" = "$before_spec" ] || fail "kube-proxy's DaemonSet is not restored as it was"

echo "check-swap: ok (backup, clusterCIDR and server carried, image set before the apply, restored as it was)"

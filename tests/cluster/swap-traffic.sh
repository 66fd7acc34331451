#!/bin/bash
# The swap under traffic, on the lab cluster with kube-proxy (IPVS) serving: two client pods
# on the last node send requests without pause, one through a ClusterIP, one through a
# NodePort of the first node, to two servers (and a third, the control, to the first node's
# server by its pod IP, past any service proxy); deploy/swap.sh to-agent, a pause, then
# deploy/swap.sh back, as an operator runs them. Reports per phase the requests, those that
# failed and the longest time without an answer, from the clients' own timestamped lines.
#
#   swap-traffic.sh KUBECONFIG KUBECTL OUT_DIR AGENT_BINARY [-- COMMAND_WHILE_SWAPPED...]
#
# COMMAND_WHILE_SWAPPED runs between the two swaps (run.sh runs the e2e subset there, so the
# swapped cluster is judged too). Writes OUT_DIR/swap.md; exits 1 when a request failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export KUBECONFIG=$1 KUBECTL=$2
out=$3 agent=$4
shift 4
[[ "${1:-}" == -- ]] && shift
k() { "$KUBECTL" "$@"; }
# The marks are read on the clients' node: its log timestamps are its clock's, and an
# emulated machine's clock drifts from the host's.
now() { k -n swap-traffic exec via-cluster-ip -- date -u +%Y-%m-%dT%H:%M:%S.%NZ; }
# (not `nodes`: run.sh exports that, the node count, to the e2e run between the swaps)
node_names=$(k get nodes -o jsonpath='{.items[*].metadata.name}')
first=${node_names%% *} last=${node_names##* }
first_ip=$(k get node "$first" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')

k create namespace swap-traffic >/dev/null
k -n swap-traffic apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: server}
spec:
  replicas: 2
  selector: {matchLabels: {app: server}}
  template:
    metadata: {labels: {app: server}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: server}}}
      containers:
      - name: netexec
        image: registry.k8s.io/e2e-test-images/agnhost:2.66.1
        args: [netexec, --http-port=8080]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}
---
apiVersion: v1
kind: Service
metadata: {name: server}
spec:
  type: NodePort
  selector: {app: server}
  ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
EOF
k -n swap-traffic rollout status deployment/server --timeout=300s >&2
cip=$(k -n swap-traffic get service server -o jsonpath='{.spec.clusterIP}')
client() {
    local name=$1 url=$2
    k -n swap-traffic apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name}
spec:
  nodeName: $last
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: registry.k8s.io/e2e-test-images/agnhost:2.66.1
    command: [sh, -c, 'while :; do if t=\$(curl -fsS -m 1 -o /dev/null -w "%{time_total}" $url); then echo "ok \$t"; else echo "fail \$?"; fi; done']
EOF
}
client via-cluster-ip "http://$cip/hostname"
client via-node-port "http://$first_ip:30080/hostname"
# The control: the server on the first node asked by its pod IP, a path no service proxy is
# on. What it loses is what the loaded, emulated nodes lose, whoever proxies.
pod_ip=$(k -n swap-traffic get pods -l app=server --field-selector spec.nodeName="$first" \
    -o jsonpath='{.items[*].status.podIP}')
[[ -n $pod_ip ]] || pod_ip=$(k -n swap-traffic get pods -l app=server -o jsonpath='{.items[*].status.podIP}')
pod_ip=${pod_ip%% *}
client via-pod-ip "http://$pod_ip:8080/hostname"
k -n swap-traffic wait --for=condition=Ready pod/via-cluster-ip pod/via-node-port pod/via-pod-ip \
    --timeout=300s >&2
marks=("kube-proxy serving=$(now)")
sleep 10
marks+=("deploy/swap.sh to-agent=$(now)")
bash "$root/deploy/swap.sh" to-agent --image localhost/kube-proxy-ipvs:dev \
    --backup "$out/kube-proxy-backup" --agent "$agent" >"$out/swap-to-agent.log" 2>&1
marks+=("the agent serving=$(now)")
sleep 20
rc=0
if (($#)); then "$@" || rc=$?; fi
marks+=("deploy/swap.sh back=$(now)")
bash "$root/deploy/swap.sh" back --backup "$out/kube-proxy-backup" >"$out/swap-back.log" 2>&1
k -n kube-system rollout status daemonset/kube-proxy --timeout=300s >&2
marks+=("kube-proxy serving again=$(now)")
sleep 20
marks+=("end=$(now)")
for c in via-cluster-ip via-node-port via-pod-ip; do
    k -n swap-traffic logs --timestamps "$c" >"$out/$c.log"
done
python3 "$here/swap_report.py" "$out" "${marks[@]}" >"$out/swap.md" || rc=1
cat "$out/swap.md" >&2
k delete namespace swap-traffic --wait=false >/dev/null
exit "$rc"

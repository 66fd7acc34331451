#!/bin/bash
# The swap under traffic, on the lab cluster with kube-proxy (IPVS) serving: deploy/swap.sh
# to-agent and then back, as an operator runs them, while a client pod on every node sends
# paced requests (two a second per path) through each node's service proxy:
#
#   cluster-ip        new HTTP connections to the Service's ClusterIP (this node's proxy)
#   node-port-NODE    new HTTP connections to the Service's NodePort on each node
#   tcp-kept          one HTTP keep-alive connection to the ClusterIP for the whole run
#                     (curl reports each reconnect: the connection was lost)
#   udp-kept          one UDP socket to the ClusterIP for the whole run, a datagram every
#                     0.5 s echoed by the server (IPVS keeps both flows' connection entries)
#   pod-ip            the control: a server on another node by its pod IP, a path no service
#                     proxy is on (what it loses, the loaded emulated nodes lose)
#
# A request fails when it has no answer within 3 s (curl -m 3): on the emulated nodes a pod
# start on the client's node stalls it for a second or two, which a 1 s limit counted as
# failures on the control path too; a lost SYN (resent after 1 s) still shows as a long gap.
#
# Before the first swap every path must have answered from every node (else the run stops,
# with each node's state captured). Each phase carries the same load and lasts as long
# (PHASE_SECS, 60 s) but the swaps themselves; a watcher on the host records when each node's
# old proxy pod went and its new one became Ready. Writes OUT_DIR/swap.md
# (swap_report.py); exits 1 when a request through a Service failed or a kept flow broke.
#
#   swap-traffic.sh KUBECONFIG KUBECTL OUT_DIR AGENT_BINARY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export KUBECONFIG=$1 KUBECTL=$2
out=$3 agent=$4
phase_secs=${PHASE_SECS:-60}
k() { "$KUBECTL" "$@"; }
ns=swap-traffic
mapfile -t node_names < <(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
declare -A node_ip
for n in "${node_names[@]}"; do
    node_ip[$n]=$(k get node "$n" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
done

k create namespace "$ns" >/dev/null
k -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: server}
spec:
  replicas: ${#node_names[@]}
  selector: {matchLabels: {app: server}}
  template:
    metadata: {labels: {app: server}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: server}}}
      containers:
      - name: netexec
        image: registry.k8s.io/e2e-test-images/agnhost:2.66.1
        args: [netexec, --http-port=8080, --udp-port=8081]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}
---
apiVersion: v1
kind: Service
metadata: {name: server}
spec:
  type: NodePort
  selector: {app: server}
  ports:
  - {name: http, port: 80, targetPort: 8080, nodePort: 30080}
  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}
EOF
k -n "$ns" rollout status deployment/server --timeout=300s >&2
cip=$(k -n "$ns" get service server -o jsonpath='{.spec.clusterIP}')

# The client on NODE: every path at once, each line "PATH ok SECONDS", "PATH fail CODE",
# "tcp-kept CONNECTS CODE SECONDS", "udp-kept SEQ" (the echo of datagram SEQ, numbered from 1
# on each socket) or "PATH ended" (a kept flow that ended, restarted at once). Every line is
# one write (curl's goes through sed), so that the loops' lines do not mix, and is written when
# it happens: curl's write-out to a pipe is block-buffered unless stdbuf makes it line-buffered
# (without it, a run's kept-connection lines came in bursts of 171, 4 KiB, and the log's
# timestamps put them in the wrong phases).
client() {
    local node=$1 other=$2 pod_ip paths='' n
    pod_ip=$(k -n "$ns" get pods -l app=server --field-selector "spec.nodeName=$other" \
        -o jsonpath='{.items[0].status.podIP}')
    for n in "${node_names[@]}"; do
        paths+="probe node-port-$n http://${node_ip[$n]}:30080/hostname & "
    done
    k -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: client-$node, labels: {app: client}}
spec:
  nodeName: $node
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: registry.k8s.io/e2e-test-images/agnhost:2.66.1
    command:
    - sh
    - -c
    - |
      probe() {
        while :; do
          if t=\$(curl -fsS -m 3 -o /dev/null -w '%{time_total}' "\$2" 2>/dev/null); then echo "\$1 ok \$t"; else echo "\$1 fail \$?"; fi
          sleep 0.5
        done
      }
      probe cluster-ip http://$cip/hostname &
      probe pod-ip http://$pod_ip:8080/hostname &
      $paths
      while :; do
        stdbuf -oL curl -sS --rate 2/s -m 2 -o /dev/null -w 'tcp-kept %{num_connects} %{http_code} %{time_total}\n' "http://$cip/hostname?n=[1-1000000]" | sed -u ''
        echo "tcp-kept ended"; sleep 0.5
      done &
      while :; do
        i=0; while :; do i=\$((i + 1)); echo "echo \${i}u"; sleep 0.5; done | nc -u $cip 81 | stdbuf -o0 tr u '\n' | sed -u 's/^/udp-kept /'
        echo "udp-kept ended"; sleep 0.5
      done &
      wait
EOF
}
for i in "${!node_names[@]}"; do
    client "${node_names[i]}" "${node_names[(i + 1) % ${#node_names[@]}]}"
done
k -n "$ns" wait --for=condition=Ready pod -l app=client --timeout=300s >&2

# Each node's clock against the host's (the clients' log lines carry the node's time): the
# middle of a host-timed exec of `date` in the node's client. Read at the start and the end.
offsets() {
    local n a b t
    for n in "${node_names[@]}"; do
        a=$(date +%s.%N)
        t=$(k -n "$ns" exec "client-$n" -- date +%s.%N)
        b=$(date +%s.%N)
        echo "$n $a $t $b"
    done
}
offsets >"$out/clock-start.txt"

# The precondition: every path has answered on every node.
paths=(cluster-ip pod-ip tcp-kept udp-kept)
for n in "${node_names[@]}"; do paths+=("node-port-$n"); done
for _ in $(seq 120); do
    missing=()
    for n in "${node_names[@]}"; do
        log=$(k -n "$ns" logs "client-$n" 2>/dev/null || true)
        for p in "${paths[@]}"; do
            case $p in
                tcp-kept) re='^tcp-kept [0-9]+ 200 ' ;;
                udp-kept) re='^udp-kept [0-9]+$' ;;
                *) re="^$p ok " ;;
            esac
            grep -qE "$re" <<<"$log" || missing+=("$p from $n")
        done
    done
    [[ ${#missing[@]} == 0 ]] && break
    sleep 5
done
if [[ ${#missing[@]} != 0 ]]; then
    echo "swap: precondition failed, never answered: ${missing[*]}" >&2
    for n in "${node_names[@]}"; do k -n "$ns" logs "client-$n" >"$out/client-$n.log" 2>&1 || true; done
    if declare -F capture >/dev/null; then capture "$out/precondition-state"; fi
    exit 1
fi

# The watcher: each second, every kube-system pod's node, name, Ready and deletion (host time),
# and a line of its own for each poll (one that saw no pod at all is a poll too).
(
    set +e
    while :; do
        echo "$(date +%s.%N) - poll"
        k -n kube-system get pods -o jsonpath='{range .items[*]}{.spec.nodeName} {.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}' |
            sed "s/^/$(date +%s.%N) /"
        sleep 1
    done
) >"$out/pods.txt" 2>/dev/null &
watcher=$!
trap 'kill "$watcher" 2>/dev/null || true' EXIT

mark() { echo "$1=$(date +%s.%N)" >>"$out/marks.txt"; }
: >"$out/marks.txt"
mark "kube-proxy serving"
sleep "$phase_secs"
mark "deploy/swap.sh to-agent"
bash "$root/deploy/swap.sh" to-agent --image localhost/kube-proxy-ipvs:dev \
    --backup "$out/kube-proxy-backup" --agent "$agent" >"$out/swap-to-agent.log" 2>&1
mark "the agent serving"
sleep "$phase_secs"
mark "deploy/swap.sh back"
bash "$root/deploy/swap.sh" back --backup "$out/kube-proxy-backup" >"$out/swap-back.log" 2>&1
mark "kube-proxy serving again"
sleep "$phase_secs"
mark "end"
offsets >"$out/clock-end.txt"
for n in "${node_names[@]}"; do
    k -n "$ns" logs --timestamps "client-$n" >"$out/client-$n.log"
done
rc=0
python3 "$here/swap_report.py" "$out" >"$out/swap.md" || rc=1
cat "$out/swap.md" >&2
k delete namespace "$ns" --wait=false >/dev/null
exit "$rc"

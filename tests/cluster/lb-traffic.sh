#!/bin/bash
# LoadBalancer Services through MetalLB's layer 2 (run.sh --lb metallb, two nodes), asked
# from outside the cluster: two client network namespaces on the host, plugged into the
# nodes' bridge (client-a NET.100, client-b NET.101), as a host on the nodes' LAN is. One
# server pod on node-1 (agnhost netexec) behind three LoadBalancer Services:
#   lb-cluster  externalTrafficPolicy Cluster: the LB IP answers; arping sees exactly one MAC
#               (strictARP on: only the node MetalLB elected answers ARP for it; off, every
#               node holding it on kube-ipvs0 answers too, metallb#153); when the elected
#               node's speaker goes, the IP moves and the client is served again (how long)
#   lb-local    externalTrafficPolicy Local: the client's own address reaches the pod, only
#               node-1 (the endpoint's) announces it, and node-2, asked directly, does not
#               answer
#   lb-ranges   loadBalancerSourceRanges NET.100/32: client-a answers, client-b is dropped
# Writes what it saw to OUT/lb.txt and each check's verdict to OUT/lb.json; exits 1 when a
# check fails. With STRICT off, the ARP check expects more than one MAC (so that it can fail).
#
#   lb-traffic.sh KUBECTL KUBECONFIG OUT BRIDGE NET STRICT(on|off)
set -uo pipefail
kubectl_bin=$1 kubeconfig=$2 out=$3 bridge=$4 net=$5 strict=$6
k() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }
ns=lab-lb image=registry.k8s.io/e2e-test-images/agnhost:2.66.1
mkdir -p "$out"
log=$out/lb.txt results=()
: >"$log"
say() { echo "lb: $*" | tee -a "$log" >&2; }
# verdict NAME PASS(0|1) WHAT [SECONDS]: one check's result, for lb.json (SECONDS: what it
# measured, for the page's figures).
verdict() {
    local ok=$2
    results+=("$(printf '{"check": "%s", "pass": %s, "saw": "%s", "seconds": %s}' "$1" \
        "$([[ $ok == 0 ]] && echo true || echo false)" "${3//\"/\'}" "${4:-null}")")
    say "$1: $([[ $ok == 0 ]] && echo pass || echo FAILED): $3"
}

clients=(client-a client-b)
cleanup() {
    for c in "${clients[@]}"; do ip netns del "lab-$c" 2>/dev/null; ip link del "lab-$c" 2>/dev/null; done
    k delete namespace "$ns" --wait=false >/dev/null 2>&1
}
trap cleanup EXIT
for i in 0 1; do
    c=${clients[i]}
    ip netns add "lab-$c"
    ip link add "lab-$c" type veth peer name eth0 netns "lab-$c"
    ip link set "lab-$c" master "$bridge" up
    ip -n "lab-$c" addr add "$net.10$i/24" dev eth0
    ip -n "lab-$c" link set eth0 up
    ip -n "lab-$c" link set lo up
done
on() { local c=$1; shift; ip netns exec "lab-$c" "$@"; }
# Each node's MAC on the nodes' network, as a client learns it.
declare -A node_of
for i in 1 2; do
    on client-a ping -c 1 -W 2 "$net.1$i" >/dev/null
    mac=$(on client-a ip neigh show "$net.1$i" | awk '{print $5}')
    node_of[$mac]=node-$i
done
# MAC_OF C IP: the MAC client C's neighbour table holds for IP.
mac_of() { on "$1" ip neigh show "$2" | awk '$5 ~ /:/ {print $5}'; }
# ASK C IP PATH: one HTTP answer from the server through IP, or nothing after 2 s.
ask() { on "$1" curl -s -m 2 "http://$2/$3" 2>/dev/null; }

k create namespace "$ns" >/dev/null
k -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: server, labels: {app: server}}
spec:
  nodeName: node-1
  containers:
  - {name: server, image: $image, args: [netexec, --http-port=8080]}
---
apiVersion: v1
kind: Service
metadata: {name: lb-cluster}
spec:
  type: LoadBalancer
  selector: {app: server}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: lb-local}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app: server}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: lb-ranges}
spec:
  type: LoadBalancer
  loadBalancerSourceRanges: [$net.100/32]
  selector: {app: server}
  ports: [{port: 80, targetPort: 8080}]
EOF
k -n "$ns" wait --for=condition=Ready pod/server --timeout=300s >/dev/null ||
    { k -n "$ns" get pods -o wide >&2; say "the server did not start"; exit 1; }
ready=$(date +%s.%N)
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
declare -A lb
for s in lb-cluster lb-local lb-ranges; do
    for _ in $(seq 120); do
        lb[$s]=$(k -n "$ns" get service "$s" -o jsonpath='{.status.loadBalancer.ingress[0].ip}')
        [[ -n ${lb[$s]} ]] && break
        sleep 1
    done
    [[ -n ${lb[$s]} ]] || { say "$s got no LoadBalancer IP from MetalLB in 120 s"; exit 1; }
    say "$s: LoadBalancer IP ${lb[$s]}"
done
# The first answer through each IP, from the server's Ready: the proxy's programming and
# MetalLB's announcement (the IPs are asked one after the other).
for s in lb-cluster lb-local lb-ranges; do
    ok=1
    for _ in $(seq 120); do [[ $(ask client-a "${lb[$s]}" hostname) == server ]] && ok=0 && break; sleep 1; done
    t=$(since "$ready")
    verdict "first-answer-$s" $ok "client-a through ${lb[$s]}: $([[ $ok == 0 ]] && echo answered || echo nothing) $t s after the server was Ready" "$t"
done

# lb-cluster: answered, through the node MetalLB elected.
got=$(ask client-a "${lb[lb-cluster]}" hostname) mac=$(mac_of client-a "${lb[lb-cluster]}")
elected=${node_of[$mac]:-unknown}
[[ $got == server && $elected != unknown ]]
verdict lb-ip-answers $? "[$got] through $mac ($elected)"
# ARP: who answers for the IP.
macs=$(on client-b arping -c 3 -w 4 -I eth0 "${lb[lb-cluster]}" 2>&1 | grep -o '\[[0-9a-fA-F:]*\]' | sort -u | tr '\n' ' ')
n=$(wc -w <<<"$macs")
if [[ $strict == on ]]; then [[ $n == 1 ]]; else [[ $n -gt 1 ]]; fi
verdict "arp-replies-strictARP-$strict" $? "$n MAC(s): $macs"

# lb-local: the client's own address, node-1 alone, node-2 silent.
got=$(ask client-a "${lb[lb-local]}" clientip) mac=$(mac_of client-a "${lb[lb-local]}")
[[ ${got%:*} == "$net.100" && ${node_of[$mac]:-} == node-1 ]]
verdict local-keeps-source "[$got] through $mac (${node_of[$mac]:-unknown})"
node2_mac=$(for m in "${!node_of[@]}"; do [[ ${node_of[$m]} == node-2 ]] && echo "$m"; done)
on client-b ip neigh replace "${lb[lb-local]}" lladdr "$node2_mac" dev eth0 nud permanent
got=$(ask client-b "${lb[lb-local]}" hostname)
on client-b ip neigh del "${lb[lb-local]}" dev eth0
[[ -z $got ]]
verdict local-other-node-silent $? "node-2 asked directly: [$got]"

# lb-ranges: the allowed client in, the other dropped.
a=$(ask client-a "${lb[lb-ranges]}" hostname) b=$(ask client-b "${lb[lb-ranges]}" hostname)
[[ $a == server && -z $b ]]
verdict source-ranges "client-a [$a], client-b [$b]"

# Failover: the elected node's speaker goes (the DaemonSet no longer runs there).
if [[ $elected == node-1 || $elected == node-2 ]]; then
    k -n metallb-system patch daemonset speaker --type=strategic -p "$(printf '{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":["%s"]}]}]}}}}}}}' "$elected")" >/dev/null
    started=$(date +%s.%N) moved=''
    for _ in $(seq 600); do
        got=$(ask client-a "${lb[lb-cluster]}" hostname) mac=$(mac_of client-a "${lb[lb-cluster]}")
        if [[ $got == server && -n ${node_of[$mac]:-} && ${node_of[$mac]} != "$elected" ]]; then
            moved=$(since "$started")
            break
        fi
        sleep 0.5
    done
    [[ -n $moved ]]
    verdict failover $? "from $elected to ${node_of[$mac]:-nowhere}: served again after ${moved:-more than 300} s" "${moved:-null}"
    k -n metallb-system patch daemonset speaker --type=json \
        -p '[{"op": "remove", "path": "/spec/template/spec/affinity"}]' >/dev/null
    k -n metallb-system rollout status daemonset/speaker --timeout=300s >/dev/null
else
    verdict failover 1 "no elected node known"
fi

{
    echo '['
    for i in "${!results[@]}"; do
        printf '  %s%s\n' "${results[i]}" "$([[ $i -lt $((${#results[@]} - 1)) ]] && echo ,)"
    done
    echo ']'
} >"$out/lb.json"
failed=$(grep -c '"pass": false' "$out/lb.json")
say "$(grep -c '"pass": true' "$out/lb.json") checks passed, $failed failed ($out/lb.json)"
[[ $failed == 0 ]]

#!/bin/bash
# Traffic across the overlay (run.sh --cni flannel, two nodes), before any e2e test: a server
# pod on node-1 behind a ClusterIP Service (agnhost netexec, TCP and UDP), and two clients on
# node-2, an ordinary pod and a host-network pod (as kubelet and node agents are: the case of
# kubernetes#90084 and flannel#1243). Each client asks, TRIES times: the Service's TCP and UDP
# ports through its ClusterIP (UDP across VXLAN: flannel#1266's checksums), the server's pod
# IP (the overlay alone, the control), and kube-dns for the Service's name over UDP and TCP,
# once the proxy has programmed the Service (each client's first answer through it).
# Writes each answer to OUT/overlay.txt; exits 1 when any is wrong, naming it.
#
#   overlay-traffic.sh KUBECTL KUBECONFIG OUT [TRIES=5]
set -uo pipefail
kubectl_bin=$1 kubeconfig=$2 out=$3 tries=${4:-5}
k() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }
ns=lab-overlay image=registry.k8s.io/e2e-test-images/agnhost:2.66.1
mkdir -p "$out"
log=$out/overlay.txt
: >"$log"
k create namespace "$ns" >/dev/null
k -n "$ns" apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: Pod
metadata: {name: server, labels: {app: server}}
spec:
  nodeName: node-1
  containers:
  - {name: server, image: $image, args: [netexec, --http-port=8080, --udp-port=8081]}
---
apiVersion: v1
kind: Service
metadata: {name: server}
spec:
  selector: {app: server}
  ports:
  - {name: tcp, port: 80, targetPort: 8080, protocol: TCP}
  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}
---
apiVersion: v1
kind: Pod
metadata: {name: pod-client}
spec:
  nodeName: node-2
  containers:
  - {name: client, image: $image, args: [pause]}
---
apiVersion: v1
kind: Pod
metadata: {name: host-client}
spec:
  nodeName: node-2
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
  containers:
  - {name: client, image: $image, args: [pause]}
EOF2
if ! k -n "$ns" wait --for=condition=Ready pod/server pod/pod-client pod/host-client --timeout=300s >/dev/null; then
    k -n "$ns" get pods -o wide >&2
    echo "overlay: the pods did not start" >&2
    exit 1
fi
k -n "$ns" get pods -o wide >>"$log"
cluster_ip=$(k -n "$ns" get service server -o jsonpath='{.spec.clusterIP}')
pod_ip=$(k -n "$ns" get pod server -o jsonpath='{.status.podIP}')
dns=$(k -n kube-system get service kube-dns -o jsonpath='{.spec.clusterIP}')
name=server.$ns.svc.cluster.local
# The proxy programs the new Service on its own time (kube-proxy's syncs exec ipset and
# iptables, slow under emulation): the checks start once each client got one answer through
# the ClusterIP over TCP and UDP, or after 120 s; that wait is programming latency, not the
# overlay's, and is logged.
for client in pod-client host-client; do
    for s in $(seq 0 120); do
        if [[ $(k -n "$ns" exec "$client" -- curl -s -m 2 "http://$cluster_ip/hostname" 2>/dev/null) == server &&
            $(k -n "$ns" exec "$client" -- sh -c "echo hostname | nc -u -w 2 $cluster_ip 81" 2>/dev/null) == server ]]; then
            break
        fi
        sleep 1
    done
    echo "$client: the ClusterIP answered after about $s s" >>"$log"
done
wrong=() asked=0
# check CLIENT WHAT WANT COMMAND: one answer, logged; a wrong one is counted.
check() {
    local got
    asked=$((asked + 1))
    got=$(k -n "$ns" exec "$1" -- sh -c "$4" 2>&1 | tr '\n' ' ' | sed 's/ *$//')
    echo "$1 $2: [$got]" >>"$log"
    [[ $got == "$3" ]] || wrong+=("$1 $2: [$got], not [$3]")
}
for client in pod-client host-client; do
    for _ in $(seq "$tries"); do
        check "$client" "TCP to the ClusterIP" server "curl -s -m 5 http://$cluster_ip/hostname"
        check "$client" "UDP to the ClusterIP" server "echo hostname | nc -u -w 3 $cluster_ip 81"
        check "$client" "TCP to the pod IP" server "curl -s -m 5 http://$pod_ip:8080/hostname"
        check "$client" "DNS over UDP" "$cluster_ip" "dig +short +time=3 +tries=1 $name @$dns"
        check "$client" "DNS over TCP" "$cluster_ip" "dig +tcp +short +time=3 +tries=1 $name @$dns"
    done
done
k delete namespace "$ns" --wait=false >/dev/null
echo "overlay: $((asked - ${#wrong[@]})) of $asked answers right ($log)" | tee -a "$log" >&2
if [[ ${#wrong[@]} -gt 0 ]]; then
    printf 'overlay: %s\n' "${wrong[@]}" | tee -a "$log" >&2
    exit 1
fi

#!/bin/bash
# The smoke test for the vagrant cluster, run on the host from vagrant/ after `vagrant up`:
#
#   ./smoke-test.sh [--keep]
#
# 1. kube-proxy-ipvs runs on every node and kube-proxy does not;
# 2. a Service is reachable from a pod, by ClusterIP and by name (cluster DNS is itself a
#    Service the agent programs), and requests spread over its three endpoints;
# 3. its NodePort answers from outside the cluster on every node (from this host when it
#    can reach the private network, else from the control plane to each worker);
# 4. `ipvsadm -ln` on each node shows the Service's virtual server and its real servers;
# 5. scaled to 5 replicas and back to 2, every node's IPVS follows (5, then 2 real servers);
# 6. a LoadBalancer Service with externalTrafficPolicy: Local answers on its health-check node
#    port of every node as kube-proxy does: 200 with the node's count of local endpoints where
#    it has some, 503 where it has none.
# The test's namespace is deleted at the end unless --keep is given.
set -uo pipefail

cd "$(dirname "$0")" || exit 1
keep=false
[ "${1:-}" = "--keep" ] && keep=true
net=${KPI_NET:-192.168.56}
workers=${KPI_WORKERS:-2}
nodes=(cp)
for i in $(seq 1 "$workers"); do nodes+=("w$i"); done
ns=kpi-smoke
node_port=30080
passed=0
failed=0

ok() { echo "PASS  $*"; passed=$((passed + 1)); }
bad() { echo "FAIL  $*"; failed=$((failed + 1)); }
on() { local node=$1; shift; vagrant ssh "$node" -c "$*" -- -q 2>/dev/null | tr -d '\r'; }
k() { on cp "kubectl $*"; }

echo "== the agent on every node"
ready=$(k -n kube-system get daemonset kube-proxy-ipvs -o jsonpath='{.status.numberReady}/{.status.desiredNumberScheduled}')
if [ -n "$ready" ] && [ "${ready%/*}" = "${ready#*/}" ] && [ "${ready%/*}" -gt 0 ]; then
    ok "kube-proxy-ipvs ready on $ready nodes"
else
    bad "kube-proxy-ipvs ready: '$ready'"
fi
if [ -z "$(k -n kube-system get daemonset kube-proxy --ignore-not-found -o name)" ]; then
    ok "no kube-proxy DaemonSet"
else
    bad "kube-proxy is deployed too"
fi

echo "== a Service with three endpoints and a NodePort"
k create namespace "$ns" --dry-run=client -o yaml '|' kubectl apply -f - >/dev/null
on cp "cat <<'YAML' | kubectl -n $ns apply -f -
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: registry.k8s.io/e2e-test-images/agnhost:2.53
          args: [netexec, --http-port=8080]
          ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 8080, targetPort: 8080, nodePort: $node_port}]
YAML" >/dev/null
if k -n "$ns" rollout status deployment/web --timeout=5m >/dev/null; then
    ok "web: 3 pods ready"
else
    bad "web did not become ready"
fi
cluster_ip=$(k -n "$ns" get service web -o jsonpath='{.spec.clusterIP}')
echo "web ClusterIP $cluster_ip, NodePort $node_port"

echo "== from a pod"
k -n "$ns" delete pod client --ignore-not-found >/dev/null
k -n "$ns" run client --image=docker.io/library/busybox:1.36 --restart=Never -- \
    sh -c "'for i in 1 2 3 4 5 6 7 8 9; do wget -qO- -T 5 http://$cluster_ip:8080/hostname; echo; done; wget -qO- -T 5 http://web.$ns.svc.cluster.local:8080/hostname; echo'" >/dev/null
k -n "$ns" wait pod/client --for=jsonpath='{.status.phase}'=Succeeded --timeout=3m >/dev/null
out=$(k -n "$ns" logs client)
hosts=$(printf '%s\n' "$out" | grep '^web-' | sort -u | wc -l)
answers=$(printf '%s\n' "$out" | grep -c '^web-')
if [ "$answers" -eq 10 ]; then
    ok "pod -> ClusterIP and -> web.$ns by name: 10 of 10 answered"
else
    bad "pod -> Service: $answers of 10 answered: $out"
fi
if [ "$hosts" -ge 2 ]; then
    ok "requests spread over $hosts endpoints (rr)"
else
    bad "requests reached $hosts endpoint(s)"
fi

echo "== NodePort from outside"
for i in "${!nodes[@]}"; do
    ip="$net.$((10 + i))"
    if command -v curl >/dev/null && curl -sf --max-time 3 "http://$ip:$node_port/hostname" >/dev/null 2>&1; then
        ok "host -> $ip:$node_port"
    elif [ "${nodes[$i]}" != cp ] && [ -n "$(on cp "curl -sf --max-time 5 http://$ip:$node_port/hostname")" ]; then
        ok "cp -> ${nodes[$i]} $ip:$node_port (this host cannot reach $net.0/24)"
    else
        bad "NodePort $ip:$node_port does not answer"
    fi
done

echo "== ipvsadm -ln on each node"
for node in "${nodes[@]}"; do
    table=$(on "$node" "sudo ipvsadm -ln")
    echo "--- $node"
    printf '%s\n' "$table" | grep -A3 -F "$cluster_ip:8080" || true
    real=$(printf '%s\n' "$table" | grep -A3 -F "TCP  $cluster_ip:8080 rr" | grep -c -- '->.*Masq')
    if [ "$real" -eq 3 ]; then
        ok "$node: $cluster_ip:8080 rr with 3 real servers"
    else
        bad "$node: $cluster_ip:8080 has $real real servers"
    fi
    if printf '%s\n' "$table" | grep -q ":$node_port rr"; then
        ok "$node: NodePort $node_port virtual servers"
    else
        bad "$node: no NodePort $node_port virtual server"
    fi
done

real_servers() { # node -> the Masq real servers of the ClusterIP's virtual server
    on "$1" "sudo ipvsadm -ln" | grep -A20 -F "TCP  $cluster_ip:8080 rr" | tail -n +2 |
        sed '/^[A-Z]/,$d' | grep -c -- '->.*Masq'
}

echo "== IPVS follows a scaled Deployment"
for replicas in 5 2; do
    k -n "$ns" scale deployment/web --replicas="$replicas" >/dev/null
    if ! k -n "$ns" rollout status deployment/web --timeout=5m >/dev/null; then
        bad "web did not reach $replicas replicas"
        continue
    fi
    # Terminating pods leave their endpoints when they are gone: give the agent a little time.
    for node in "${nodes[@]}"; do
        got=
        for _ in $(seq 1 30); do
            got=$(real_servers "$node")
            [ "$got" = "$replicas" ] && break
            sleep 2
        done
        if [ "$got" = "$replicas" ]; then
            ok "$node: $replicas real servers after scaling to $replicas"
        else
            bad "$node: $got real servers after scaling to $replicas"
        fi
    done
done

echo "== externalTrafficPolicy: Local and its health-check node port"
hc_port=32080
on cp "cat <<'YAML' | kubectl -n $ns apply -f -
apiVersion: v1
kind: Service
metadata: {name: local}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  healthCheckNodePort: $hc_port
  selector: {app: web}
  ports: [{port: 8080, targetPort: 8080, nodePort: 30081}]
YAML" >/dev/null
sleep 5
for i in "${!nodes[@]}"; do
    node=${nodes[$i]}
    ip="$net.$((10 + i))"
    local_pods=$(k -n "$ns" get pods -l app=web --field-selector "spec.nodeName=$node,status.phase=Running" -o name | grep -c . || true)
    # From cp: the host may not reach the private network.
    answer=$(on cp "curl -s --max-time 5 -w ' %{http_code}' http://$ip:$hc_port/healthz")
    code=${answer##* }
    if [ "$local_pods" -gt 0 ]; then
        want=200
    else
        want=503
    fi
    if [ "$code" = "$want" ] && printf '%s' "$answer" | grep -q "\"localEndpoints\": *$local_pods"; then
        ok "$node: health-check port $hc_port answers $code with $local_pods local endpoint(s)"
    else
        bad "$node: health-check port $hc_port: '$answer', want $want with $local_pods local endpoint(s)"
    fi
done

if ! $keep; then
    k delete namespace "$ns" --wait=false >/dev/null
fi
echo
echo "smoke test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# The initial read's decoding, JSON against protobuf, on the real API server's bytes (issue 30,
# item 2: the agent's client reads JSON, kube-proxy's asks for protobuf). Starts the lab's real
# kube-apiserver on the host (`lab control-plane`), creates S(N, 5) with server-side apply (the
# benches' shape: tests/peers/tests/beside/mod.rs), saves the Service and EndpointSlice lists as
# JSON and as protobuf in target/decode-N/, and runs crates/agent/examples/decode.rs on them.
#
#   bench/decode.sh [N] [REPS]      N = 10000, REPS = 5 (a few minutes on the host)
#
# It measures the host's CPU, not the lab's: compare the ratio, not the milliseconds.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000} reps=${2:-5}
bash tests/setup.sh >/dev/null
cargo build --release --quiet -p lab
cargo build --release --quiet -p kube-proxy-ipvs-agent --example decode
target=${CARGO_TARGET_DIR:-target}
out=$target/decode-$n
dir=target/lab/control-plane
mkdir -p "$out"
fifo=$(mktemp -u)
mkfifo "$fifo"
"$target/release/lab" control-plane <"$fifo" >"$out/control-plane.log" 2>&1 &
cp=$!
exec 3>"$fifo" # the control plane's stdin: a line stops it
trap 'echo >&3 || true; exec 3>&-; wait $cp || true; rm -f "$fifo"' EXIT
until grep -q '^control plane in' "$out/control-plane.log"; do
    kill -0 $cp 2>/dev/null || { cat "$out/control-plane.log" >&2; exit 1; }
    sleep 1
done
kubectl=("$dir/bin/kubectl" --kubeconfig "$dir/admin-host.kubeconfig")
server=$("${kubectl[@]}" config view --raw -o jsonpath='{.clusters[0].cluster.server}')
token=$("${kubectl[@]}" config view --raw -o jsonpath='{.users[0].user.token}')

python3 - "$n" >"$out/objects.json" <<'PY'
import ipaddress, json, sys
n = int(sys.argv[1])
v4 = lambda base, i: str(ipaddress.IPv4Address(base) + i)
items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns{k}"}}
         for k in range((n - 1) // 100 + 1)]
for i in range(1, n):
    ns, name = f"ns{i // 100}", f"svc{i}"
    port = {"port": 80, "targetPort": 8080, "protocol": "TCP"}
    spec = {"clusterIP": v4("10.96.0.1", i), "type": "ClusterIP"}
    if i % 10 == 5:
        spec["type"], port["nodePort"] = "NodePort", 30000 + i // 10
    if i % 50 == 7:
        spec["externalIPs"] = [v4("172.16.0.0", i)]
    if i % 100 == 3:
        spec["sessionAffinity"] = "ClientIP"
    spec["ports"] = [port]
    items.append({"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": name, "namespace": ns}, "spec": spec})
    items.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"name": f"{name}-x", "namespace": ns,
                               "labels": {"kubernetes.io/service-name": name}},
                  "addressType": "IPv4",
                  "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
                  "endpoints": [{"addresses": [v4("10.128.0.0", i * 5 + j)],
                                 "conditions": {"ready": True}, "nodeName": "node-b"}
                                for j in range(5)]})
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
PY
t=$(date +%s)
"${kubectl[@]}" apply --server-side --field-manager=bench -f "$out/objects.json" >/dev/null
echo "decode: S($n, 5) created in $(($(date +%s) - t)) s"
get() { # PATH ACCEPT FILE
    curl -sSf --cacert "$dir/ca.crt" -H "Authorization: Bearer $token" -H "Accept: $2" \
        "$server$1" -o "$out/$3"
}
for enc in json:application/json pb:application/vnd.kubernetes.protobuf; do
    get /api/v1/services "${enc#*:}" "services.${enc%%:*}"
    get /apis/discovery.k8s.io/v1/endpointslices "${enc#*:}" "slices.${enc%%:*}"
done
"$target/release/examples/decode" "$out" "$reps"

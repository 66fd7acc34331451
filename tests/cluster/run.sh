#!/bin/bash
# A real Kubernetes cluster in the lab, and Kubernetes' own e2e tests run against its service
# proxy. The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# CoreDNS) runs on the host at full speed; each node is a lab VM (tests/cluster/node.sh:
# containerd 2.x, runc, the CNI bridge plugin or flannel, kubelet) on a host bridge that the
# API server reaches (exec, logs and port-forward go through each kubelet's port 10250). Every program
# is built from its pinned Go module (tests/cluster/build.sh, tests/peers/build.sh) and every
# image locally (tests/cluster/images.sh): nothing is pulled.
#
# The service proxy is installed the way an operator installs it:
#   --proxy agent       deploy/ applied with kubectl (rbac, configmap with its two
#                       placeholders filled as deploy/README.md says, daemonset), the image
#                       built by deploy/build-image.sh
#   --proxy kube-proxy  upstream kube-proxy v1.37.2 in IPVS mode as kubeadm runs it
#                       (tests/cluster/kube-proxy.yaml)
#   --proxy kube-proxy-nftables  the same kube-proxy in nftables mode (the mode upstream
#                       moves IPVS users to: the latency comparison's third column)
#
#   tests/cluster/run.sh [--proxy agent|kube-proxy] [--nodes 1|2] [--cni bridge|flannel]
#                        [--lb metallb [--strict-arp off]] [--focus RE] [--skip RE] [--out DIR] [--keep] [--keep-failed] [--swap]
#                        [--no-e2e] [--procs N] [--slot N] [--latency N [--services M]]
#
#   --cni           bridge (default): the CNI bridge plugin, each node's pods on a /24 set by
#                   this script and routed by static routes on the nodes; flannel: flannel
#                   v0.28.10 as kube-flannel.yml deploys it (tests/cluster/flannel/manifest.sh),
#                   VXLAN, the /24s allocated by kube-controller-manager; with two nodes,
#                   tests/cluster/overlay-traffic.sh checks pod and host-network clients
#                   across it first (DIR/overlay.txt)
#   --lb metallb    MetalLB v0.16.1 in layer-2 mode (tests/cluster/metallb/: built from its
#                   module only for such a run, deployed by its own manifest), with an
#                   IPAddressPool of NET.200-219 on the nodes' network and an L2Advertisement;
#                   the proxy runs with strictARP, as MetalLB asks (--strict-arp off: without,
#                   to show what strictARP is for); the API server reaches the controller's
#                   webhook at its pod (--enable-aggregator-routing: the host runs no proxy)
#   --focus/--skip  ginkgo regular expressions (default: every shard of tests/cluster/shards.txt,
#                   and tests/cluster/skip.txt)
#   --out           where the junit report and logs go (default target/cluster/out/PROXY),
#                   with samples/node-N.txt (each node's proxy every 30 s: /healthz and its
#                   sync metrics) and, when a test failed, state/node-N.txt (each node's IPVS,
#                   ipsets, kube-ipvs0, iptables and proxy metrics, read after the run)
#   --keep-failed   failed tests keep their namespaces, so that the state read after the run
#                   still holds their Services (a diagnosis: their pods load the nodes for the
#                   rest of the run, more on the side that fails more; off for comparisons)
#   --keep          leave the cluster up at the end (Enter tears it down)
#   --swap          after the e2e run, the swap under traffic (tests/cluster/swap-traffic.sh;
#                   with --proxy kube-proxy): to the agent and back, clients on every node;
#                   its page section is DIR/swap/swap.md
#   --no-e2e        bring the cluster up and the proxy, and run no e2e tests
#   --procs N       e2e tests run in parallel by N ginkgo processes (default 4)
#   --slot N        another cluster beside slot 0's (0-9: its own bridge, network, run directory)
#   --latency N     network programming latency before the e2e tests (two nodes;
#                   tests/cluster/latency.py: N changes of each kind, asked from node-2, after
#                   --services M Services without pods, one change every $LATENCY_EVERY s
#                   (default 2); DIR/latency/: latency.json, run.json)
set -euo pipefail
# One block: bash reads it whole before running it, so the file can change under a run.
{
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

proxy=agent nodes=2 cni=bridge lb=none strict_arp=on focus='' skip='' out='' keep=0 delete_failed=true swap=0 e2e=1 procs=4 slot=0 latency=0 services=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --proxy) proxy=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --focus) focus=$2; shift 2 ;;
        --skip) skip=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --keep-failed) delete_failed=false; shift ;;
        --swap) swap=1; shift ;;
        --no-e2e) e2e=0; shift ;;
        --procs) procs=$2; shift 2 ;;
        --slot) slot=$2; shift 2 ;;
        --cni) cni=$2; shift 2 ;;
        --lb) lb=$2; shift 2 ;;
        --strict-arp) strict_arp=$2; shift 2 ;;
        --latency) latency=$2; shift 2 ;;
        --services) services=$2; shift 2 ;;
        -h | --help) sed -n '2,54p' "$0"; exit 0 ;;
        *) echo "cluster: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case $proxy in agent | kube-proxy | kube-proxy-nftables) ;;
    *) echo "cluster: --proxy is agent, kube-proxy or kube-proxy-nftables" >&2; exit 2 ;; esac
[[ $latency == 0 || $nodes == 2 ]] || { echo "cluster: --latency needs two nodes" >&2; exit 2; }
case $nodes in 1 | 2) ;; *) echo "cluster: --nodes is 1 or 2" >&2; exit 2 ;; esac
case $cni in bridge | flannel) ;; *) echo "cluster: --cni is bridge or flannel" >&2; exit 2 ;; esac
case $lb in none | metallb) ;; *) echo "cluster: --lb is metallb" >&2; exit 2 ;; esac
case $strict_arp in on | off) ;; *) echo "cluster: --strict-arp is on or off" >&2; exit 2 ;; esac
case $slot in [0-9]) ;; *) echo "cluster: --slot is 0 to 9" >&2; exit 2 ;; esac
if [[ $swap == 1 && $proxy != kube-proxy ]]; then
    echo "cluster: --swap starts from kube-proxy: add --proxy kube-proxy" >&2; exit 2
fi
out=${out:-$root/target/cluster/out/$proxy}
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)
say() { echo "cluster: $* ($(($(date +%s) - start))s)" >&2; }

# The lab bridge: the host is .1, node i is .1i; node i's pods are 10.244.i.0/24. Another
# --slot is another cluster beside it: its own bridge, addresses, pod network and ports.
bridge=labk8s$slot net=192.168.$((123 + slot)) api_ip=192.168.$((123 + slot)).1
pods=10.$((244 + slot)) pod_cidr=10.$((244 + slot)).0.0/16 service_cidr=10.96.0.0/12 dns_ip=10.96.0.10
etcd_port=$((12379 + 10 * slot))
suffix=${slot#0}
node_names=()
for i in $(seq "$nodes"); do node_names+=("node-$i"); done

bins=$(bash "$here/build.sh" | tail -1)
peers=$(bash tests/peers/build.sh | tail -1)
# MetalLB's programs before the images: images.sh makes its images once they exist.
[[ $lb == none ]] || bash "$here/metallb/build.sh" >/dev/null
images=${CLUSTER_IMAGES:-$(bash "$here/images.sh" | tail -1)}
more_images=()
[[ $cni == bridge ]] || more_images+=("$images/$cni")
if [[ $lb == metallb ]]; then
    [[ -f $images/metallb/speaker.tar ]] || { echo "cluster: no MetalLB images in $images" >&2; exit 1; }
    more_images+=("$images/metallb")
fi
store=$(bash "$here/node-store.sh" "$images" "$bins/bin" "${more_images[@]}" | tail -1)
cargo build --quiet -p lab
lab=$root/target/debug/lab
# helm from its Go module (deploy/render.sh builds it once): the agent goes in through the chart.
helm=$(bash deploy/render.sh --print-helm)
cargo run --quiet -p lab -- image >/dev/null
kubectl() { "$peers/kubectl" --kubeconfig "$run/admin.kubeconfig" "$@"; }

run=$root/target/cluster/run${suffix:+-$suffix}
pids=() vms=() host_routes=()
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    local rc=$?
    set +e
    if [[ $keep == 1 ]]; then
        echo "cluster: up; KUBECONFIG=$run/admin.kubeconfig; press Enter to tear it down" >&2
        read -r _ || true
    fi
    # Last started, first stopped (etcd goes after the API server); whatever has not ended
    # 20 s later is killed: the API server's graceful shutdown can wait for ever on etcd.
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
    for _ in $(seq 20); do
        local alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [[ $alive == 0 ]] && break
        sleep 1
    done
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    for r in "${host_routes[@]}"; do ip route del "$r" 2>/dev/null; done
    for i in $(seq "$nodes"); do ip link del "$bridge-n$i" 2>/dev/null; done
    ip link del "$bridge" 2>/dev/null
    cp "$run"/*.log "$out/" 2>/dev/null
    say "down (exit $rc)"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Leftovers of an interrupted run (their ports and devices would be taken): the previous
# run.sh, whose own clean-up stops what it started, then any program it left orphaned
# (matched by its path at the start of the command line, so no shell matches).
if [[ -f "$run.pid" ]]; then
    old=$(cat "$run.pid")
    if [[ "$old" != "$$" ]] && kill "$old" 2>/dev/null; then
        for _ in $(seq 60); do kill -0 "$old" 2>/dev/null || break; sleep 1; done
    fi
fi
echo "$$" >"$run.pid"
orphans="^($peers/|$bins/|$lab run ).*$run/"
if pkill -f "$orphans" 2>/dev/null; then
    sleep 2
    pkill -9 -f "$orphans" 2>/dev/null || true
fi
ip link del "$bridge" 2>/dev/null || true
for i in 1 2; do ip link del "$bridge-n$i" 2>/dev/null || true; done
rm -rf "$run"
mkdir -p "$run"

# --- the network ---------------------------------------------------------------------------
ip link add "$bridge" type bridge
ip addr add "$api_ip/24" dev "$bridge"
ip link set "$bridge" up
for i in $(seq "$nodes"); do
    ip tuntap add "$bridge-n$i" mode tap
    ip link set "$bridge-n$i" master "$bridge" up
done

# --- the control plane on the host ---------------------------------------------------------
apiserver_extra=()
# Webhooks (MetalLB's) at their pods, which the host reaches by its routes, not at their
# ClusterIPs, which only a node's proxy serves.
[[ $lb == none ]] || apiserver_extra+=(--enable-aggregator-routing=true)
bash "$here/pki.sh" "$run/pki" "$api_ip" "${node_names[@]}"
cp "$run/pki/admin.kubeconfig" "$run/admin.kubeconfig"
p=$run/pki
"$peers/etcd" --data-dir "$run/etcd" --listen-client-urls http://127.0.0.1:$etcd_port \
    --listen-peer-urls http://127.0.0.1:$((etcd_port + 1)) >"$run/etcd.log" 2>&1 &
pids+=($!)
"$peers/kube-apiserver" --etcd-servers=http://127.0.0.1:$etcd_port \
    --bind-address="$api_ip" --advertise-address="$api_ip" --secure-port=6443 \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range="$service_cidr" --service-node-port-range=30000-32767 \
    --allow-privileged=true --profiling=false --cert-dir="$run/apiserver-certs" \
    "${apiserver_extra[@]}" >"$run/kube-apiserver.log" 2>&1 &
pids+=($!)
for _ in $(seq 120); do
    kubectl get --raw /readyz >/dev/null 2>&1 && break
    sleep 1
done
kubectl get --raw /readyz >/dev/null
say "API server ready at https://$api_ip:6443"
# With flannel, each node's /24 is the one kube-controller-manager gives it (flannel's
# --kube-subnet-mgr reads the Node's podCIDR), as kubeadm's --pod-network-cidr has it do.
cidr_allocation=(--allocate-node-cidrs=false)
[[ $cni == bridge ]] || cidr_allocation=(--allocate-node-cidrs=true --node-cidr-mask-size=24)
"$bins/kube-controller-manager" --kubeconfig="$p/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$p/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$p/controller-manager.kubeconfig" \
    --secure-port=0 --leader-elect=false \
    --use-service-account-credentials=true --service-account-private-key-file="$p/sa.key" \
    --root-ca-file="$p/ca.crt" --cluster-signing-cert-file="$p/ca.crt" \
    --cluster-signing-key-file="$p/ca.key" --service-cluster-ip-range="$service_cidr" \
    --cluster-cidr="$pod_cidr" "${cidr_allocation[@]}" \
    >"$run/kube-controller-manager.log" 2>&1 &
pids+=($!)
"$bins/kube-scheduler" --kubeconfig="$p/scheduler.kubeconfig" \
    --authentication-kubeconfig="$p/scheduler.kubeconfig" \
    --authorization-kubeconfig="$p/scheduler.kubeconfig" \
    --secure-port=0 --leader-elect=false \
    >"$run/kube-scheduler.log" 2>&1 &
pids+=($!)

# CoreDNS on the host's bridge address, behind the kube-dns Service (selectorless: its
# endpoint is the host), as the cluster's DNS and the nodes' resolver.
kubectl apply -f "$here/coredns.yaml" >/dev/null
sed "s|BIND|$api_ip|; s|KUBECONFIG|$p/coredns.kubeconfig|; s|UPSTREAM|$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf)|" \
    "$here/Corefile" >"$run/Corefile"
"$bins/bin/coredns" -conf "$run/Corefile" -dns.port 53 >"$run/coredns.log" 2>&1 &
pids+=($!)
kubectl -n kube-system apply -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: lab-cluster}
addressType: IPv4
endpoints: [{addresses: ["$api_ip"], conditions: {ready: true}}]
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
EOF

# --- the nodes -----------------------------------------------------------------------------
# boot_node I: starts node I's VM in the background; its pid goes to vms[I-1] and pids.
boot_node() {
    local i=$1 name=node-$1 c j f b routes args
    c=$run/$name
    mkdir -p "$c"
    cp "$p/ca.crt" "$c/"
    cp "$p/node-$name.kubeconfig" "$c/kubelet.conf"
    sed "s|CA_FILE|$c/ca.crt|; s|DNS_IP|$dns_ip|" "$here/kubelet-config.yaml" >"$c/kubelet-config.yaml"
    ln -f "$store" "$c/node-store.tar" 2>/dev/null || cp "$store" "$c/node-store.tar"
    routes=() subnet=flannel
    if [[ $cni == bridge ]]; then
        subnet=$pods.$i.0/24
        for j in $(seq "$nodes"); do
            [[ $j == "$i" ]] || routes+=("$pods.$j.0/24=$net.1$j")
        done
    fi
    args=(run --machine pc --smp 2 --memory 3072 --timeout 14400
        --tap "$bridge-n$i" --mac "52:54:00:12:3$slot:1$i" --file "$here/node.sh" --file "$here/node-setup.sh")
    for f in "$c"/*; do args+=(--file "$f"); done
    for b in kubelet containerd containerd-shim-runc-v2 ctr runc bridge host-local loopback portmap; do
        args+=(--exe "$bins/bin/$b")
    done
    "$lab" "${args[@]}" -- bash "$here/node.sh" "$name" "$net.1$i" "$subnet" \
        "$bins/bin" "$c" "${routes[@]}" >>"$run/$name.log" 2>&1 &
    pids+=($!)
    vms[i - 1]=$!
}
for i in $(seq "$nodes"); do
    if [[ $cni == bridge ]]; then
        ip route add "$pods.$i.0/24" via "$net.1$i"
        host_routes+=("$pods.$i.0/24")
    fi
    boot_node "$i"
done
say "booting ${nodes} node VM(s)"
# A node whose emulated kernel locks up while it boots (a guest CPU stuck 300 s, which `lab
# run` ends the VM for: seen under TCG with Debian's 6.1 kernel, in the first minutes, on
# either proxy's run) boots once more; any other stop, or a second lock-up, ends the run.
rebooted=()
# wait_nodes registered|ready: until every node is (booting a locked-up VM again).
wait_nodes() {
local i
for _ in $(seq 900); do
    if [[ $1 == registered ]]; then
        ready=$(kubectl get nodes -o name 2>/dev/null | grep -c . || true)
    else
        ready=$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c True || true)
    fi
    [[ $ready == "$nodes" ]] && break
    for i in $(seq "$nodes"); do
        kill -0 "${vms[i - 1]}" 2>/dev/null && continue
        if grep -q 'the guest kernel locked up' "$run/node-$i.log" && [[ " ${rebooted[*]} " != *" $i "* ]]; then
            say "node-$i's VM locked up in its kernel while booting: booting it again"
            grep -m1 'the guest kernel locked up' "$run/node-$i.log" | cut -c1-300 >&2
            rebooted+=("$i")
            boot_node "$i"
            continue
        fi
        say "a node VM stopped"
        tail -n 20 "$run"/node-*.log >&2
        exit 1
    done
    sleep 2
done
if [[ $ready != "$nodes" ]]; then
    say "only $ready of $nodes nodes became $1"; tail -n 20 "$run"/node-*.log >&2; exit 1
fi
}
# install_proxy: the service proxy, as an operator installs it.
# strictARP: what MetalLB's layer 2 asks of an IPVS proxy, and only then.
strict=false
[[ $lb == none || $strict_arp == off ]] || strict=true
install_proxy() {
case $proxy in
    agent)
        # Through the chart (deploy/chart, whose default rendering is deploy/*.yaml), as an
        # operator with helm installs it; the metrics on the node's address, as for
        # kube-proxy: the host samples them.
        "$helm" template kube-proxy-ipvs deploy/chart --namespace kube-system \
            --set apiServer="https://$api_ip:6443" --set config.clusterCIDR="$pod_cidr" \
            --set config.metricsBindAddress=0.0.0.0:10249 \
            --set config.ipvs.strictARP="$strict" | kubectl apply -f - >/dev/null
        ds=kube-proxy-ipvs
        ;;
    kube-proxy | kube-proxy-nftables)
        mode=ipvs
        [[ $proxy == kube-proxy ]] || mode=nftables
        manifest=$(sed "s|CLUSTER_CIDR|$pod_cidr|; s|APISERVER|https://$api_ip:6443|
            s|^\(      scheduler: rr\)\$|\1\n      strictARP: $strict|
            s|^\(    mode:\) ipvs\$|\1 $mode|" "$here/kube-proxy.yaml")
        grep -q "^      strictARP: $strict\$" <<<"$manifest" ||
            { echo "cluster: kube-proxy.yaml has no ipvs.scheduler line for strictARP" >&2; exit 1; }
        grep -q "^    mode: $mode\$" <<<"$manifest" ||
            { echo "cluster: kube-proxy.yaml has no mode line" >&2; exit 1; }
        kubectl apply -f - <<<"$manifest" >/dev/null
        ds=kube-proxy
        ;;
esac
}
if [[ $cni == flannel ]]; then
    # flannel reaches the API server through the kubernetes Service, which only the proxy
    # makes answer, and a node is Ready only once flannel wrote its CNI configuration: the
    # proxy goes first, on the registered (not yet Ready) nodes, as on a kubeadm cluster.
    wait_nodes registered
    say "$nodes node(s) registered"
    install_proxy
    bash "$here/flannel/manifest.sh" "$pod_cidr" | kubectl apply -f - >/dev/null
    if ! kubectl -n kube-flannel rollout status daemonset/kube-flannel-ds --timeout=900s >&2; then
        kubectl get pods -A -o wide >&2
        kubectl -n kube-flannel describe pods >&2 || true
        kubectl -n kube-flannel logs -l app=flannel --all-containers --tail=30 >&2 || true
        exit 1
    fi
    say "flannel Ready on every node"
    # The host (the control plane, e2e.test) reaches each node's pods through the node.
    for i in $(seq "$nodes"); do
        cidr=$(kubectl get node "node-$i" -o jsonpath='{.spec.podCIDR}')
        ip route add "$cidr" via "$net.1$i"
        host_routes+=("$cidr")
    done
fi
wait_nodes ready
[[ ${#rebooted[@]} == 0 ]] || echo "node VMs booted twice after a lock-up: ${rebooted[*]}" >"$out/node-reboots.txt"
say "$nodes node(s) Ready"
# A zone per node, as a cloud's nodes have: the Topology Hints and Traffic Distribution tests
# need endpoints in more than one zone.
for i in $(seq "$nodes"); do
    kubectl label --overwrite node "node-$i" "topology.kubernetes.io/zone=zone-$i" >/dev/null
done

# --- the service proxy, as an operator installs it ---------------------------------------
[[ $cni == flannel ]] || install_proxy
if ! kubectl -n kube-system rollout status "daemonset/$ds" --timeout=600s >&2; then
    kubectl -n kube-system get pods -o wide >&2
    kubectl -n kube-system describe pods >&2 || true
    exit 1
fi
say "$proxy Ready on every node"
kubectl -n kube-system get pods -o wide >"$out/kube-system-pods.txt"
# The tests start once every node's proxy has finished its first sync of every IP family it
# serves (kube-proxy has no readiness probe: a pod can be Ready before its first sync), read
# from the sync metric both proxies export.
synced() { # NODE: has each family in the proxy's sync metrics a last sync?
    curl -s -m 5 "http://$net.1$1:10249/metrics" | awk '
        /^kubeproxy_sync_proxy_rules_/ && match($0, /ip_family="[^"]*"/) { fam[substr($0, RSTART, RLENGTH)] = 1 }
        /^kubeproxy_sync_proxy_rules_last_timestamp_seconds/ && $2 > 0 && match($0, /ip_family="[^"]*"/) { done[substr($0, RSTART, RLENGTH)] = 1 }
        END { n = 0; for (f in fam) { n++; if (!(f in done)) exit 1 }; exit n == 0 }'
}
for i in $(seq "$nodes"); do
    for _ in $(seq 300); do synced "$i" && break; sleep 1; done
    synced "$i" || { say "node-$i: the proxy has not synced every IP family in 300 s"; exit 1; }
done
say "$proxy synced on every node"
if [[ $cni == flannel && $nodes == 2 ]]; then
    # A cluster whose overlay drops a path is no ground for the e2e tests: it fails here.
    bash "$here/overlay-traffic.sh" "$peers/kubectl" "$run/admin.kubeconfig" "$out" || exit 1
    say "traffic across the overlay answered (overlay.txt)"
fi
if [[ $lb == metallb ]]; then
    # Its controller is the webhook that validates its pool: the pool waits for it.
    bash "$here/metallb/manifest.sh" | kubectl apply -f - >/dev/null
    if ! kubectl -n metallb-system rollout status deployment/controller --timeout=600s >&2 ||
        ! kubectl -n metallb-system rollout status daemonset/speaker --timeout=600s >&2; then
        kubectl -n metallb-system get pods -o wide >&2
        kubectl -n metallb-system describe pods >&2 || true
        kubectl -n metallb-system logs -l app=metallb --all-containers --tail=30 >&2 || true
        exit 1
    fi
    for _ in $(seq 60); do
        bash "$here/metallb/manifest.sh" --pool "$net" | kubectl apply -f - >/dev/null 2>"$run/metallb-pool.err" && break
        sleep 5
    done
    kubectl -n metallb-system get ipaddresspool lab >/dev/null ||
        { cat "$run/metallb-pool.err" >&2; say "MetalLB's pool was refused for 300 s"; exit 1; }
    say "MetalLB Ready, its pool $net.200-219 announced in layer 2 (strictARP $strict_arp)"
fi
# What ran, for report.py (run.json): the commit, and each image's ID (its config's digest,
# which the nodes' runtime reports as the image's ID) from the archives the nodes loaded.
image_id() {
    tar -xOf "$images/$1.tar" manifest.json |
        python3 -c 'import json, sys; print("sha256:" + json.load(sys.stdin)[0]["Config"].removesuffix(".json"))'
}
# The harness's commit, and the agent's (agent-commit.sh: a shard run later at another
# harness commit still runs the same agent).
commit=$(git rev-parse HEAD)
# The shards' own records, written under tests/cluster/results and committed later, are not a change.
git diff --quiet HEAD -- crates deploy tests/cluster Cargo.toml Cargo.lock ':(exclude)tests/cluster/results' ||
    commit="$commit+local-changes"
agent_commit=$(bash "$here/agent-commit.sh")
record() { # STARTED FINISHED EXIT [FILE]: run.json (or FILE)
    RUN_PROXY=$proxy RUN_CNI=$cni RUN_LB=$lb RUN_STRICT_ARP=$strict RUN_COMMIT=$commit RUN_AGENT_COMMIT=$agent_commit RUN_NODES=$nodes RUN_PROCS=$procs RUN_FOCUS=$focus \
        RUN_SKIP=$skip RUN_STARTED=$1 RUN_FINISHED=$2 RUN_EXIT=$3 \
        RUN_AGENT_IMAGE=$(image_id kube-proxy-ipvs) RUN_KUBE_PROXY_IMAGE=$(image_id kube-proxy) \
        RUN_AGNHOST_IMAGE=$(image_id agnhost) \
        RUN_METALLB_IMAGES=$([[ $lb == none ]] || echo "controller=$(image_id metallb/controller);speaker=$(image_id metallb/speaker)") \
        RUN_PODS=$(kubectl -n kube-system get pods -o jsonpath='{range .items[*]}{.spec.nodeName}={.status.containerStatuses[0].imageID};{end}') \
        python3 -c '
import json, os
e = {k[4:].lower(): v for k, v in os.environ.items() if k.startswith("RUN_")}
for k in ("nodes", "procs", "started", "finished", "exit"):
    e[k] = int(e[k])
e["pods"] = [p for p in e["pods"].split(";") if p]
e["metallb_images"] = dict(p.split("=", 1) for p in e["metallb_images"].split(";") if p)
print(json.dumps(e, indent=1, sort_keys=True))' >"${4:-$out/run.json}"
}

if [[ $lb == metallb && $nodes == 2 ]]; then
    # Clients outside the cluster (DIR/lb/: lb.txt, lb.json, and run.json for
    # stack_report.py); a failed check is a result, kept.
    started=$(date +%s) lb_rc=0
    bash "$here/lb-traffic.sh" "$peers/kubectl" "$run/admin.kubeconfig" "$out/lb" "$bridge" \
        "$net" "$strict_arp" || lb_rc=$?
    [[ $lb_rc == 0 ]] || say "a LoadBalancer check failed ($out/lb/lb.txt)"
    record "$started" "$(date +%s)" "$lb_rc" "$out/lb/run.json"
fi

if [[ $latency != 0 ]]; then
    # Before the e2e tests, on a cluster that holds nothing else; a probe never answered is
    # a result, kept.
    started=$(date +%s) lat_rc=0
    python3 "$here/latency.py" --kubeconfig "$run/admin.kubeconfig" --out "$out/latency" \
        --metrics "http://$net.12:10249/metrics" --changes "$latency" --services "$services" --every "${LATENCY_EVERY:-2}" ||
        lat_rc=$?
    [[ $lat_rc == 0 ]] || say "a latency probe was never answered ($out/latency/latency.txt)"
    record "$started" "$(date +%s)" "$lat_rc" "$out/latency/run.json"
    kubectl delete namespace lab-latency lab-bulk --wait=false >/dev/null 2>&1 || true
fi

# --- what the proxy did, for the tests that fail -----------------------------------------
# Every 30 s, each node's proxy as the host sees it: /healthz (its lastUpdated) and its sync
# metrics, so that a failure can be set against the proxy's syncs around it.
mkdir -p "$out/samples"
(
    set +e # a proxy that does not answer is a sample too
    while :; do
        for i in $(seq "$nodes"); do
            {
                echo "# $(date -u +%FT%TZ)"
                curl -s -m 5 "http://$net.1$i:10256/healthz" && echo
                curl -s -m 5 "http://$net.1$i:10249/metrics" |
                    grep -E '^kubeproxy_(sync_proxy_rules_(duration_seconds_(sum|count)|last_timestamp_seconds|last_queued_timestamp_seconds|(service|endpoint)_changes_(pending|total))|network_programming_duration_seconds_(sum|count))'
            } >>"$out/samples/node-$i.txt" 2>&1
        done
        sleep 30
    done
) &
pids+=($!)
# capture DIR: each node's kernel state (IPVS, ipsets, kube-ipvs0, iptables) and its proxy's
# /healthz and metrics, read by a privileged host-network pod on the node (the kube-proxy
# image, which carries the tools), whichever proxy runs there; and each kubelet's log.
capture() {
    local dir=$1 i
    mkdir -p "$dir"
    kubectl create namespace lab-capture >/dev/null 2>&1 || true
    for i in $(seq "$nodes"); do
        kubectl -n lab-capture get pod "capture-node-$i" >/dev/null 2>&1 ||
            kubectl -n lab-capture run "capture-node-$i" --image=registry.k8s.io/kube-proxy:v1.37.2 \
                --image-pull-policy=IfNotPresent --restart=Never --overrides="{\"spec\": {\"nodeName\": \"node-$i\", \"hostNetwork\": true, \"tolerations\": [{\"operator\": \"Exists\"}], \"containers\": [{\"name\": \"capture\", \"image\": \"registry.k8s.io/kube-proxy:v1.37.2\", \"command\": [\"sleep\", \"infinity\"], \"securityContext\": {\"privileged\": true}}]}}" \
                >/dev/null
    done
    for i in $(seq "$nodes"); do
        # shellcheck disable=SC2016 # for the pod's shell
        if kubectl -n lab-capture wait --for=condition=Ready "pod/capture-node-$i" --timeout=300s >/dev/null &&
            kubectl -n lab-capture exec "capture-node-$i" -- sh -c '
                echo "# $(date -u +%FT%TZ) ipvsadm -Ln"; ipvsadm -Ln
                echo "# ip addr show kube-ipvs0"; ip addr show kube-ipvs0
                echo "# ipset list"; ipset list
                echo "# iptables-save"; iptables-save
                echo "# /healthz"; curl -s -m 5 127.0.0.1:10256/healthz; echo
                echo "# metrics"; curl -s -m 5 127.0.0.1:10249/metrics | grep "^kubeproxy_"' \
                >"$dir/node-$i.txt" 2>&1; then
            continue
        fi
        say "capture: node-$i unreadable (see $dir/node-$i.txt)"
    done
    # Each kubelet's log (node.sh serves it): why a pod went early or late.
    for i in $(seq "$nodes"); do
        curl -s -m 30 "http://$net.1$i:10080/kubelet.log" >"$dir/kubelet-node-$i.log" 2>&1 || true
    done
    kubectl get services,endpointslices -A -o wide >"$dir/services.txt" 2>&1 || true
}

# --- Kubernetes' own tests -----------------------------------------------------------------
# e2e FOCUS SKIP DIR: e2e.test against the cluster, its junit report and log into DIR.
e2e() {
    local rc=0
    mkdir -p "$3"
    say "e2e: focus $1"
    # In parallel, as Kubernetes' own jobs run it ([Serial] tests run alone at the end): the
    # tests mostly wait for pods, and the emulated nodes take seconds to start each.
    "$bins/ginkgo" --procs="$procs" --no-color --timeout=3h --focus="$1" --skip="$2" \
        "$bins/e2e.test" -- --kubeconfig="$run/admin.kubeconfig" --provider=skeleton \
        --kubectl-path="$peers/kubectl" --num-nodes="$nodes" --report-dir="$3" \
        --disable-log-dump --minStartupPods=0 --delete-namespace-on-failure="$delete_failed" \
        --e2e-verify-service-account=false >"$3/e2e.log" 2>&1 &
    # In the background and waited for: a signal to this script then stops it at once
    # (bash runs traps only between foreground commands), and the clean-up stops ginkgo.
    pids+=($!)
    wait "$!" || rc=$?
    grep -E '^(Ran |FAIL|PASS|SUCCESS|\[FAIL\])' "$3/e2e.log" | tail -n 40 >&2 || true
    say "e2e exit $rc"
    # With --keep-failed the failed tests' Services are still there to be looked for.
    if [[ $rc != 0 ]]; then
        say "e2e: capturing each node's state into $3/state"
        capture "$3/state"
    fi
    return "$rc"
}
if [[ -z "$focus" ]]; then focus=$(awk '!/^#/ && NF { $1 = $2 = ""; sub(/^ +/, ""); print }' "$here/shards.txt" | paste -sd'|'); fi
if [[ -z "$skip" ]]; then skip=$(grep -v '^#' "$here/skip.txt" | sed 's/ *#.*//' | grep . | paste -sd'|'); fi
rc=0
if [[ $e2e == 1 ]]; then
    started=$(date +%s)
    e2e "$focus" "$skip" "$out" || rc=$?
    record "$started" "$(date +%s)" "$rc"
fi
# The service proxy's own account of the run, before the cluster goes: its pods' logs (kube-system
# holds nothing else: CoreDNS runs on the host).
mkdir -p "$out/proxy-logs"
log_namespaces=(kube-system)
[[ $cni != flannel ]] || log_namespaces+=(kube-flannel)
[[ $lb == none ]] || log_namespaces+=(metallb-system)
for ns in "${log_namespaces[@]}"; do
    for pod in $(kubectl -n "$ns" get pods -o name 2>/dev/null); do
        kubectl -n "$ns" logs "$pod" --all-containers >"$out/proxy-logs/${pod#pod/}.log" 2>&1 || true
    done
done
if [[ $swap == 1 ]]; then
    # The same load in every phase: nothing runs beside the swap's clients.
    cargo build --quiet -p kube-proxy-ipvs-agent
    export -f say capture kubectl
    export run peers nodes start net
    started=$(date +%s)
    mkdir -p "$out/swap"
    # The build the swap ran (its report names it); the finish is not known yet.
    record "$started" "$started" 0 "$out/swap/run.json"
    bash "$here/swap-traffic.sh" "$run/admin.kubeconfig" "$peers/kubectl" "$out/swap" \
        "$root/target/debug/kube-proxy-ipvs" || rc=$?
fi
exit "$rc"
}

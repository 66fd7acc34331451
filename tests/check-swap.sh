#!/bin/bash
# The swap guide's kubectl commands (deploy/swap.sh, deploy/README.md) against a real
# kube-apiserver (the lab's control plane: etcd and kube-apiserver from tests/peers/build.sh,
# on this host; no nodes, so no pod runs and no rollout is waited for):
#   0. a kube-proxy configuration the agent refuses (masqueradeBit 40) stops the swap before
#      anything changes, saying why (with a binary); without a binary the swap says it could
#      not check the configuration;
#   1. a kubeadm kube-proxy (DaemonSet with a logging flag, and a ConfigMap in iptables mode
#      that sets strictARP, a scheduler, excludeCIDRs, the IPVS timeouts, nodePortAddresses,
#      masqueradeAll, a conntrack timeout and an iptables-mode period) is swapped for the agent
#      with an image name: the swap says, before it changes anything, what the agent warns
#      about; the backup holds both objects; the configuration the agent then reads (its
#      --write-config-to, with the DaemonSet's flags, when a binary is given) holds each of
#      kube-proxy's settings, in IPVS mode with the agent's kubeconfig; the init container's
#      sysctls carry strict ARP and the conntrack timeout; both containers run the image and
#      the agent's command carries the logging flag; the DaemonSet's healthz port (its probes')
#      follows kube-proxy's healthzBindAddress; kube-proxy's objects are gone; a second
#      swap refuses and keeps the backup;
#   2. going back restores kube-proxy's DaemonSet and ConfigMap as they were and removes the
#      agent's objects;
#   3. from nftables mode, nftables.masqueradeAll becomes the iptables.masqueradeAll IPVS mode
#      reads (swap.sh plan, which changes nothing).
#
#   tests/check-swap.sh [--binary PATH]
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
binary=
[ "${1:-}" = "--binary" ] && binary=${2:-}
tmp=$(mktemp -d)
# shellcheck source=tests/control-plane.sh
. tests/control-plane.sh
cleanup() {
    control_plane_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "check-swap: FAIL: $*" >&2
    exit 1
}

control_plane_start "$tmp"
export KUBECONFIG=$CONTROL_PLANE_DIR/admin-host.kubeconfig
export KUBECTL=$repo/target/peers/kubectl
k() { "$KUBECTL" "$@"; }

# ---- kubeadm's kube-proxy, as `kubeadm init` makes it (shortened to what matters here)
cat >"$tmp/kube-proxy.yaml" <<'YAML'
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
    conntrack:
      maxPerCore: null
      min: null
      tcpCloseWaitTimeout: null
      tcpEstablishedTimeout: 2h
    detectLocalMode: ClusterCIDR
    iptables:
      masqueradeAll: true
      masqueradeBit: 14
      syncPeriod: 10s
    ipvs:
      excludeCIDRs:
      - 10.1.0.0/16
      - 172.31.0.0/16
      scheduler: sh
      strictARP: true
      tcpFinTimeout: 30s
      tcpTimeout: 15m
      udpTimeout: 5s
    mode: ""
    healthzBindAddress: 0.0.0.0:10266
    nodePortAddresses:
    - 192.168.56.0/24
    oomScoreAdj: -999
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
          command: [/usr/local/bin/kube-proxy, --config=/var/lib/kube-proxy/config.conf, --hostname-override=$(NODE_NAME), --v=2]
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
k apply -f "$tmp/kube-proxy.yaml" >/dev/null
before_data=$(k -n kube-system get configmap kube-proxy -o 'jsonpath={.data}')
before_spec=$(k -n kube-system get daemonset kube-proxy -o 'jsonpath={.spec.template}')

image=registry.example.com/kube-proxy-ipvs:0.1.0
backup=$tmp/backup
agent=()
[ -z "$binary" ] || agent=(--agent "$binary")

# ---- 0. a configuration the agent refuses: nothing changes
if [ -n "$binary" ]; then
    sed 's/^      masqueradeBit: 14$/      masqueradeBit: 40/' "$tmp/kube-proxy.yaml" | k apply -f - >/dev/null
    if sh deploy/swap.sh to-agent --image "$image" --backup "$tmp/refused" --no-wait "${agent[@]}" >"$tmp/refused.log" 2>&1; then
        cat "$tmp/refused.log" >&2
        fail "the swap went on with a masqueradeBit the agent refuses"
    fi
    grep -q 'REFUSES' "$tmp/refused.log" || { cat "$tmp/refused.log" >&2; fail "the swap did not say the agent refuses the configuration"; }
    [ ! -e "$tmp/refused" ] || fail "a refused swap wrote a backup"
    [ -n "$(k -n kube-system get daemonset kube-proxy --ignore-not-found -o name)" ] || fail "a refused swap deleted kube-proxy"
    [ -z "$(k -n kube-system get configmap kube-proxy-ipvs --ignore-not-found -o name)" ] || fail "a refused swap applied the agent's ConfigMap"
    k -n kube-system get configmap kube-proxy -o 'jsonpath={.data.config\.conf}' | grep -q '^  masqueradeBit: 40$' ||
        fail "the refused configuration was not in place"
    k apply -f "$tmp/kube-proxy.yaml" >/dev/null
    [ "$(k -n kube-system get configmap kube-proxy -o 'jsonpath={.data}')" = "$before_data" ] || fail "could not put kube-proxy's ConfigMap back after step 0"
fi
# Without an agent binary the swap says it could not check the configuration.
if [ -z "$(command -v kube-proxy-ipvs)" ]; then
    sh deploy/swap.sh plan >"$tmp/unchecked.log" 2>&1 || { cat "$tmp/unchecked.log" >&2; fail "swap.sh plan without an agent binary"; }
    grep -q 'NOT CHECKED' "$tmp/unchecked.log" || fail "without an agent binary the swap does not say the configuration is unchecked"
fi

# ---- 1. to the agent
sh deploy/swap.sh to-agent --image "$image" --backup "$backup" --no-wait "${agent[@]}" >"$tmp/swap.log" 2>&1 ||
    { cat "$tmp/swap.log" >&2; fail "swap.sh to-agent"; }
# What the agent will not act on is said before the first change (the backup).
report=$(sed -n '1,/saved in/p' "$tmp/swap.log")
grep -q 'saved in' <<<"$report" || { cat "$tmp/swap.log" >&2; fail "the swap never said it saved the backup"; }
if [ -n "$binary" ]; then
    grep -q 'iptables.syncPeriod.*not acted on' <<<"$report" ||
        { cat "$tmp/swap.log" >&2; fail "the swap did not say, before changing anything, that the agent ignores iptables.syncPeriod"; }
fi
grep -q '^  mode: unset -> ipvs (' <<<"$report" || { cat "$tmp/swap.log" >&2; fail "the swap did not say it sets mode: ipvs"; }
grep -q 'kind: DaemonSet' "$backup/kube-proxy-daemonset.yaml" || fail "no DaemonSet in the backup"
grep -q 'kind: ConfigMap' "$backup/kube-proxy-configmap.yaml" || fail "no ConfigMap in the backup"
[ -z "$(k -n kube-system get daemonset kube-proxy --ignore-not-found -o name)" ] || fail "kube-proxy's DaemonSet is still there"
[ -z "$(k -n kube-system get configmap kube-proxy --ignore-not-found -o name)" ] || fail "kube-proxy's ConfigMap is still there"
k -n kube-system get configmap kube-proxy-ipvs -o 'jsonpath={.data.config\.conf}' >"$tmp/config.conf"
k -n kube-system get configmap kube-proxy-ipvs -o 'jsonpath={.data.kubeconfig\.conf}' >"$tmp/kubeconfig.conf"
k -n kube-system get configmap kube-proxy-ipvs -o 'jsonpath={.data.sysctls}' >"$tmp/sysctls"
grep -q 'server: https://192.168.56.10:6443$' "$tmp/kubeconfig.conf" || fail "the agent's API server is not kube-proxy's"
images=$(k -n kube-system get daemonset kube-proxy-ipvs -o 'jsonpath={.spec.template.spec.initContainers[*].image} {.spec.template.spec.containers[*].image}')
[ "$images" = "$image $image" ] || fail "the agent's images: $images"
ports=$(k -n kube-system get daemonset kube-proxy-ipvs -o 'jsonpath={range .spec.template.spec.containers[0].ports[*]}{.name}={.containerPort} {end}')
[ "$ports" = "healthz=10266 metrics=10249 " ] || fail "the DaemonSet's ports do not follow healthzBindAddress 0.0.0.0:10266: $ports"
probe=$(k -n kube-system get daemonset kube-proxy-ipvs -o 'jsonpath={.spec.template.spec.containers[0].livenessProbe.httpGet.port}')
[ "$probe" = healthz ] || fail "the liveness probe is on $probe, not the port named healthz"
mapfile -t command < <(k -n kube-system get daemonset kube-proxy-ipvs -o 'jsonpath={range .spec.template.spec.containers[0].command[*]}{@}{"\n"}{end}')
[[ " ${command[*]} " == *" --v=2 "* ]] || fail "kube-proxy's --v=2 is not in the agent's command: ${command[*]}"
for line in net/ipv4/conf/all/arp_ignore=1 net/ipv4/conf/all/arp_announce=2; do
    grep -qx "$line" "$tmp/sysctls" || fail "strictARP: the init container's sysctls do not set $line: $(cat "$tmp/sysctls")"
done
grep -qx '?net/netfilter/nf_conntrack_tcp_timeout_established=7200' "$tmp/sysctls" ||
    fail "conntrack.tcpEstablishedTimeout 2h is not in the init container's sysctls: $(cat "$tmp/sysctls")"
grep -qx '?net/netfilter/nf_conntrack_max=percpu:32768:131072' "$tmp/sysctls" ||
    fail "kube-proxy's default conntrack maximum is not in the init container's sysctls: $(cat "$tmp/sysctls")"

# The configuration the agent reads: its own --write-config-to, with the DaemonSet's flags
# (the config path made this file's); without a binary, the swapped file itself.
flags=()
for a in "${command[@]:1}"; do
    case $a in
        --config=*) flags+=("--config=$tmp/config.conf") ;;
        --hostname-override=*) flags+=(--hostname-override=check-swap) ;;
        *) flags+=("$a") ;;
    esac
done
if [ -n "$binary" ]; then
    "$binary" "${flags[@]}" --write-config-to "$tmp/effective.yaml" >"$tmp/agent.log" 2>&1 ||
        { cat "$tmp/agent.log" >&2; fail "the agent refuses the swapped configuration (${flags[*]})"; }
    read_back=$tmp/effective.yaml
else
    read_back=$tmp/config.conf
fi
# One field of $read_back: "section.field" or "field", as its line says it (block YAML).
field() {
    awk -v path="$1" 'BEGIN { n = split(path, p, ".") }
        n == 1 && index($0, p[1] ":") == 1 { v = substr($0, length(p[1]) + 2); gsub(/^ +| +$/, "", v); print v; exit }
        n == 2 && /^[^ ]/ { in_section = (index($0, p[1] ":") == 1); next }
        n == 2 && in_section && $0 ~ ("^ +" p[2] ":") { v = $0; sub(/^ +[^:]+: */, "", v); print v; exit }' "$read_back"
}
# The items of a list field, one a line, in block or flow style.
items() {
    awk -v path="$1" 'BEGIN { n = split(path, p, "."); indent = (n == 2) ? "  " : "" }
        n == 2 && /^[^ ]/ { in_section = (index($0, p[1] ":") == 1); next }
        (n == 1 || in_section) && index($0, indent p[n] ":") == 1 { on = 1; v = $0; sub(/^[^:]+: */, "", v)
            if (v ~ /^\[/) { gsub(/[][ ]/, "", v); gsub(/,/, "\n", v); print v; exit }; next }
        on && $0 ~ ("^" indent "- ") { v = $0; sub(/^ *- */, "", v); print v; next }
        on { exit }' "$read_back"
}
want() { # path value
    local got
    got=$(field "$1" | tr -d "\"'")
    [ "$got" = "$2" ] || fail "$1 in the configuration the agent reads ($(basename "$read_back")) is '$got', not '$2'"
}
want mode ipvs
want clusterCIDR 10.32.0.0/12
want detectLocalMode ClusterCIDR
want ipvs.strictARP true
want ipvs.scheduler sh
want iptables.masqueradeAll true
want clientConnection.kubeconfig /var/lib/kube-proxy-ipvs/kubeconfig.conf
want conntrack.maxPerCore 0
want oomScoreAdj -997
if [ -n "$binary" ]; then
    # The agent writes durations as Go prints them.
    want ipvs.tcpTimeout 15m0s
    want ipvs.tcpFinTimeout 30s
    want ipvs.udpTimeout 5s
    want iptables.syncPeriod 10s
    want logging.verbosity 2
else
    want ipvs.tcpTimeout 15m
    want ipvs.tcpFinTimeout 30s
    want ipvs.udpTimeout 5s
fi
[ "$(items ipvs.excludeCIDRs | tr '\n' ' ')" = "10.1.0.0/16 172.31.0.0/16 " ] ||
    fail "ipvs.excludeCIDRs in the configuration the agent reads: $(items ipvs.excludeCIDRs | tr '\n' ' ')"
[ "$(items nodePortAddresses | tr '\n' ' ')" = "192.168.56.0/24 " ] ||
    fail "nodePortAddresses in the configuration the agent reads: $(items nodePortAddresses | tr '\n' ' ')"
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

# ---- 3. from nftables mode: the masquerading IPVS mode reads from iptables.* comes from
# nftables.* (the plan alone: nothing changes)
sed -e '/^      masqueradeAll: true$/d' -e 's/^    mode: ""$/    mode: nftables/' \
    -e 's/^    iptables:$/    nftables:\n      masqueradeAll: true\n    iptables:/' "$tmp/kube-proxy.yaml" |
    k apply -f - >/dev/null
k -n kube-system get configmap kube-proxy -o 'jsonpath={.data.config\.conf}' | grep -q '^  masqueradeAll: true' ||
    fail "step 3's kube-proxy ConfigMap has no nftables.masqueradeAll"
sh deploy/swap.sh plan "${agent[@]}" >"$tmp/config.conf" 2>"$tmp/plan.log" || { cat "$tmp/plan.log" >&2; fail "swap.sh plan (nftables)"; }
grep -q '^  mode: nftables -> ipvs (' "$tmp/plan.log" || { cat "$tmp/plan.log" >&2; fail "the plan does not say nftables mode becomes ipvs"; }
if [ -n "$binary" ]; then
    "$binary" --config "$tmp/config.conf" --hostname-override check-swap --write-config-to "$tmp/effective.yaml" >"$tmp/agent.log" 2>&1 ||
        { cat "$tmp/agent.log" >&2; fail "the agent refuses the configuration planned from nftables mode"; }
    read_back=$tmp/effective.yaml
else
    read_back=$tmp/config.conf
fi
want mode ipvs
want iptables.masqueradeAll true
k apply -f "$tmp/kube-proxy.yaml" >/dev/null

echo "check-swap: ok (refused before any change; kube-proxy's configuration carried field for field and read back by $([ -n "$binary" ] && echo "the agent" || echo "text, no agent binary"); sysctls, logging flag, server and image; restored as it was)"

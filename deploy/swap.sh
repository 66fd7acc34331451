#!/bin/sh
# Swaps a kubeadm cluster's kube-proxy for kube-proxy-ipvs, and back (deploy/README.md).
#
#   deploy/swap.sh plan [--agent PATH] [--cluster-cidr CIDR]
#   deploy/swap.sh to-agent --image IMAGE [--backup DIR] [--agent PATH] [--cluster-cidr CIDR] [--no-wait]
#   deploy/swap.sh back [--backup DIR] [--no-wait]
#
# plan: says what to-agent would give the agent, changing nothing: kube-proxy's config.conf
#   with the agent's few changes on top (each named with its reason), the sysctls the init
#   container writes, kube-proxy's DaemonSet flags carried or not, and what the agent warns
#   about or refuses in that configuration. The agent binary (--agent PATH, else
#   $KUBE_PROXY_IPVS, else kube-proxy-ipvs on PATH) reads it with --write-config-to; without
#   one the configuration is carried unchecked, and plan says so. The report goes to stderr,
#   the agent's config.conf to stdout.
# to-agent: the plan (stopping, with nothing changed, if the agent refuses the configuration),
#   then backs up kube-proxy's DaemonSet and ConfigMap (kubectl get -o yaml, into DIR, default
#   ./kube-proxy-backup; refuses to overwrite a backup), applies the agent's RBAC and ConfigMap
#   (that config.conf, a kubeconfig for kube-proxy's API server, the sysctls), deletes
#   kube-proxy's DaemonSet and ConfigMap (so that `kubeadm upgrade` does not bring it back),
#   then applies the agent's DaemonSet with IMAGE in both containers and waits for its
#   rollout. Whatever mode kube-proxy ran in (iptables, nftables, ipvs), the agent removes the
#   other modes' rules when it starts.
# back: deletes the agent's DaemonSet, ConfigMap and RBAC and re-creates kube-proxy's
#   DaemonSet and ConfigMap from the backup, as they were. Going back to iptables or nftables
#   mode, run the agent's cleanup on each node first (deploy/README.md, "Go back").
#
# KUBECTL names the kubectl to run (default: kubectl); it uses the usual KUBECONFIG.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
kubectl=${KUBECTL:-kubectl}
ns=kube-system
# Where deploy/daemonset.yaml mounts the agent's ConfigMap.
agent_dir=/var/lib/kube-proxy-ipvs

usage() {
    sed -n '2,7p' "$0" >&2
    exit 2
}

[ $# -ge 1 ] || usage
verb=$1
shift
image=
backup=./kube-proxy-backup
cluster_cidr=
agent=${KUBE_PROXY_IPVS:-}
wait=true
while [ $# -gt 0 ]; do
    case $1 in
        --image) image=${2:?--image IMAGE}; shift 2 ;;
        --backup) backup=${2:?--backup DIR}; shift 2 ;;
        --cluster-cidr) cluster_cidr=${2:?--cluster-cidr CIDR}; shift 2 ;;
        --agent) agent=${2:?--agent PATH}; shift 2 ;;
        --no-wait) wait=false; shift ;;
        *) usage ;;
    esac
done
if [ -z "$agent" ]; then
    agent=$(command -v kube-proxy-ipvs || true)
elif [ ! -x "$agent" ]; then
    echo "swap: the agent binary $agent is not an executable file" >&2
    exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say() { echo "swap: $*"; }

# One field of kube-proxy's kubeconfig: data[kubeconfig.conf], the value of the first "FIELD:".
kubeconfig_field() {
    "$kubectl" -n "$ns" get configmap kube-proxy -o 'jsonpath={.data.kubeconfig\.conf}' |
        sed -n "s/^[[:space:]]*$1:[[:space:]]*//p" | head -n 1 | tr -d "\"'"
}

# Reads or sets one field of a KubeProxyConfiguration in block-style YAML (what kubeadm and
# kubectl write: top-level keys at column 0, a section's fields indented under it), by line,
# keeping everything else as it is: comments, order, quoting.
#   yaml get PATH <FILE          prints the scalar at PATH ("" when absent or null)
#   yaml set PATH VALUE WHY <FILE  prints FILE with PATH set to VALUE, "# WHY" above it
# PATH is "field" or "section.field". A section written in flow style with fields in it
# ({a: 1}) is not edited: exit 3, with a message.
yaml() {
    awk -v op="$1" -v path="$2" -v value="${3:-}" -v why="${4:-}" '
    function ind(s) { match(s, /^ */); return RLENGTH }
    function content(s) { return s !~ /^[ \t]*(#.*)?$/ }
    function scalar(s,   v) {
        v = s; sub(/^[^:]*:[ \t]*/, "", v); sub(/[ \t]+#.*$/, "", v); sub(/[ \t]+$/, "", v)
        if (v ~ /^".*"$/ || v ~ /^\047.*\047$/) v = substr(v, 2, length(v) - 2)
        if (v == "null" || v == "~") v = ""
        return v
    }
    function spaces(n) { return n > 0 ? sprintf("%" n "s", "") : "" }
    BEGIN { n = split(path, p, ".") }
    { sub(/\r$/, ""); line[NR] = $0; total = NR }
    END {
        top = 0
        for (i = 1; i <= total; i++) if (line[i] ~ ("^" p[1] ":([ \t]|$)")) { top = i; break }
        at = 0; depth = 0; child = 2
        if (n == 1) at = top
        else if (top) {
            v = scalar(line[top])
            if (v != "" && v != "{}") {
                printf "swap: %s is written in flow style (%s): this script edits block style only; rewrite it as a block\n", p[1], v > "/dev/stderr"
                exit 3
            }
            seen = 0
            for (j = top + 1; j <= total; j++) {
                if (!content(line[j])) continue
                if (ind(line[j]) == 0) break
                if (!seen) { child = ind(line[j]); seen = 1 }
                if (ind(line[j]) == child && line[j] ~ ("^ *" p[2] ":([ \t]|$)")) at = j
            }
        }
        if (n == 2) depth = child
        if (op == "get") { if (at) print scalar(line[at]); exit 0 }
        set = spaces(depth) p[n] ": " value
        if (why != "") set = spaces(depth) "# " why "\n" set
        if (at) {
            # The old value, and its block if it had one (a list, a map), go.
            for (j = at + 1; j <= total; j++) {
                if (!content(line[j])) continue
                if (ind(line[j]) > depth || (ind(line[j]) == depth && line[j] ~ /^ *- /)) drop[j] = 1
                else break
            }
            line[at] = set
        } else if (n == 2 && top) {
            line[top] = p[1] ":\n" set
        } else if (n == 2) {
            line[++total] = p[1] ":\n" set
        } else {
            line[++total] = set
        }
        for (i = 1; i <= total; i++) if (!(i in drop)) print line[i]
    }'
}

# Seconds in a Go duration ("24h0m0s", "90m", "1h30m", "0s"); empty for an empty one.
seconds() {
    awk -v d="$1" 'BEGIN {
        if (d == "") exit 0
        t = 0
        while (d != "") {
            if (!match(d, /^[0-9.]+/)) { print "bad"; exit 0 }
            x = substr(d, 1, RLENGTH) + 0; d = substr(d, RLENGTH + 1)
            if (match(d, /^(ns|us|ms|h|m|s)/)) { u = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1) }
            else if (d == "" && x == 0) u = "s"
            else { print "bad"; exit 0 }
            t += x * (u == "h" ? 3600 : u == "m" ? 60 : u == "s" ? 1 : u == "ms" ? 0.001 : u == "us" ? 1e-6 : 1e-9)
        }
        printf "%d\n", t
    }'
}

conf=$work/config.conf
# Sets PATH to VALUE in the agent's config.conf and says so: "PATH: OLD -> VALUE (WHY)".
layer() { # path value old why
    yaml set "$1" "$2" "swap.sh: $4 (kube-proxy had: ${3:-unset})" <"$conf" >"$conf.new"
    mv "$conf.new" "$conf"
    echo "  $1: ${3:-unset} -> $2 ($4)" >>"$work/changes"
}

# Everything to-agent decides, changing nothing: $work/config.conf, kubeconfig.conf, sysctls,
# flags; the report on stdout. Exits non-zero when the configuration cannot be carried.
plan() {
    if ! "$kubectl" -n "$ns" get configmap kube-proxy -o 'jsonpath={.data.config\.conf}' >"$work/kube-proxy.conf" ||
        [ ! -s "$work/kube-proxy.conf" ]; then
        echo "swap: kube-proxy's ConfigMap (kube-system/kube-proxy) has no config.conf: nothing to carry over; nothing changed" >&2
        exit 1
    fi
    case $(sed -n '/^[[:space:]]*[^#[:space:]]/{p;q;}' "$work/kube-proxy.conf") in
        "{"*)
            echo "swap: kube-proxy's config.conf is JSON: this script edits YAML only (kubeadm writes YAML); nothing changed" >&2
            exit 1 ;;
    esac
    server=$(kubeconfig_field server)
    if [ -z "$server" ]; then
        echo "swap: no server in kube-proxy's kubeconfig.conf: cannot tell the API server's address; nothing changed" >&2
        exit 1
    fi
    get() { yaml get "$1" <"$work/kube-proxy.conf"; }
    mode=$(get mode)
    cp "$work/kube-proxy.conf" "$conf"
    : >"$work/changes"

    # The agent's changes, each because the agent's pod is not kube-proxy's; the rest is
    # kube-proxy's own, field for field.
    case $mode in
        "" | iptables | nftables)
            layer mode ipvs "$mode" "the agent is IPVS mode; it removes ${mode:-iptables} mode's rules when it starts" ;;
    esac
    if [ "$mode" = nftables ]; then
        # IPVS mode reads masquerading from iptables.*; nftables mode from nftables.*.
        for f in masqueradeAll masqueradeBit; do
            v=$(get "nftables.$f")
            if [ -n "$v" ] && [ -z "$(get "iptables.$f")" ]; then
                layer "iptables.$f" "$v" "" "nftables.$f, which IPVS mode reads from iptables.$f"
            fi
        done
    fi
    layer clientConnection.kubeconfig "$agent_dir/kubeconfig.conf" "$(get clientConnection.kubeconfig)" \
        "the agent's kubeconfig: kube-proxy's API server ($server), the agent's service account"
    if [ -n "$cluster_cidr" ]; then
        layer clusterCIDR "\"$cluster_cidr\"" "$(get clusterCIDR)" "given with --cluster-cidr"
    fi

    # kube-proxy's conntrack settings, with v1alpha1's defaults, as the sysctls kube-proxy
    # writes: the init container writes them (the agent's container cannot write /proc/sys)
    # and the agent is told to leave them alone, as deploy/configmap.yaml does.
    per_core=$(get conntrack.maxPerCore); per_core=${per_core:-32768}
    min=$(get conntrack.min); min=${min:-131072}
    established=$(get conntrack.tcpEstablishedTimeout); established=${established:-24h}
    close_wait=$(get conntrack.tcpCloseWaitTimeout); close_wait=${close_wait:-1h}
    udp=$(get conntrack.udpTimeout)
    udp_stream=$(get conntrack.udpStreamTimeout)
    be_liberal=$(get conntrack.tcpBeLiberal)
    sysctl_lines=
    add_sysctl() { sysctl_lines="$sysctl_lines$1
"; }
    if [ "$per_core" -gt 0 ] 2>/dev/null; then
        add_sysctl "?net/netfilter/nf_conntrack_max=percpu:$per_core:$min"
        layer conntrack.maxPerCore 0 "$(get conntrack.maxPerCore)" "nf_conntrack_max=percpu:$per_core:$min, written by the init container from its sysctls"
    fi
    for pair in "tcp_timeout_established tcpEstablishedTimeout $established" \
        "tcp_timeout_close_wait tcpCloseWaitTimeout $close_wait" \
        "udp_timeout udpTimeout $udp" "udp_timeout_stream udpStreamTimeout $udp_stream"; do
        # shellcheck disable=SC2086 # three words
        set -- $pair
        s=$(seconds "${3:-}")
        if [ "$s" = bad ]; then
            echo "swap: conntrack.$2 = $3 is not a duration; nothing changed" >&2
            exit 1
        fi
        if [ -n "$s" ] && [ "$s" -gt 0 ]; then
            add_sysctl "?net/netfilter/nf_conntrack_$1=$s"
            layer "conntrack.$2" 0s "$(get "conntrack.$2")" "nf_conntrack_$1=$s, written by the init container from its sysctls"
        fi
    done
    if [ "$be_liberal" = true ]; then
        add_sysctl "?net/netfilter/nf_conntrack_tcp_be_liberal=1"
        layer conntrack.tcpBeLiberal false true "nf_conntrack_tcp_be_liberal=1, written by the init container from its sysctls"
    fi
    strict_arp=$(get ipvs.strictARP)
    if [ "$strict_arp" = true ]; then
        # The agent wants them (and finds them set); the init container writes them.
        add_sysctl "net/ipv4/conf/all/arp_ignore=1"
        add_sysctl "net/ipv4/conf/all/arp_announce=2"
    fi
    # The DaemonSet's named ports follow the configuration's, so that its probes (on the port
    # named healthz) reach the health server where kube-proxy's configuration puts it.
    health=$(get healthzBindAddress); health_port=${health##*:}; health_port=${health_port:-10256}
    metrics=$(get metricsBindAddress); metrics_port=${metrics##*:}; metrics_port=${metrics_port:-10249}
    for port in "$health_port" "$metrics_port"; do
        case $port in
            '' | *[!0-9]*)
                echo "swap: healthzBindAddress '$health' or metricsBindAddress '$metrics' has no port number; nothing changed" >&2
                exit 1 ;;
        esac
    done
    # kubelet gives a system-node-critical pod -997; going lower needs CAP_SYS_RESOURCE, which
    # the agent's container does not have (kube-proxy's is privileged).
    oom=$(get oomScoreAdj)
    if [ "${oom:--999}" -lt -997 ] 2>/dev/null; then
        layer oomScoreAdj -997 "$oom" "the least the agent's unprivileged container can set (kubelet's for node-critical pods)"
    fi

    # The kubeconfig and the stock sysctls come from deploy/configmap.yaml (read as YAML by
    # kubectl, client side); kube-proxy's conntrack lines replace the stock ones.
    sed -e "s|CLUSTER_CIDR_PLACEHOLDER|\"\"|" -e "s|APISERVER_PLACEHOLDER|${server}|" "$here/configmap.yaml" >"$work/template.yaml"
    "$kubectl" create --dry-run=client -f "$work/template.yaml" -o 'jsonpath={.data.kubeconfig\.conf}' >"$work/kubeconfig.conf"
    "$kubectl" create --dry-run=client -f "$work/template.yaml" -o 'jsonpath={.data.sysctls}' |
        grep -v '^?*net/netfilter/nf_conntrack_' >"$work/sysctls" || true
    printf '%s' "$sysctl_lines" >>"$work/sysctls"

    # kube-proxy's own flags: with --config it honours only --hostname-override (the agent's
    # DaemonSet sets it the same way) and the logging flags, which are carried.
    "$kubectl" -n "$ns" get daemonset kube-proxy -o \
        'jsonpath={range .spec.template.spec.containers[0]}{range .command[*]}{@}{"\n"}{end}{range .args[*]}{@}{"\n"}{end}{end}' \
        >"$work/kube-proxy.flags" || : >"$work/kube-proxy.flags"
    : >"$work/flags"
    : >"$work/flags.dropped"
    pending=
    while IFS= read -r a; do
        if [ -n "$pending" ]; then
            [ "$pending" = skip ] || echo "$pending=$a" >>"$work/flags"
            pending=
            continue
        fi
        case $a in
            */kube-proxy | kube-proxy | --config=* | --hostname-override=*) ;;
            -v=* | --v=* | --vmodule=* | --logging-format=*) echo "$a" >>"$work/flags" ;;
            -v | --v | --vmodule | --logging-format) pending=$a ;;
            --config | --hostname-override) pending=skip ;;
            *) echo "$a" >>"$work/flags.dropped" ;;
        esac
    done <"$work/kube-proxy.flags"

    cidr=$(yaml get clusterCIDR <"$conf")
    say "kube-proxy runs in ${mode:-iptables (the default)} mode, clusterCIDR '$cidr', API server $server"
    [ -n "$cidr" ] || say "warning: no clusterCIDR: the agent, as kube-proxy, then tells no pod traffic apart (give --cluster-cidr to set it)"
    say "the agent gets kube-proxy's config.conf, every field as it is, with these changes:"
    cat "$work/changes"
    say "the init container writes these sysctls before the agent starts:"
    sed 's/^/  /' "$work/sysctls"
    if [ "$health_port" != 10256 ] || [ "$metrics_port" != 10249 ]; then
        say "the DaemonSet's ports follow: healthz $health_port (its liveness and readiness probes), metrics $metrics_port"
    fi
    if [ -s "$work/flags" ]; then
        say "kube-proxy's logging flags, carried to the agent's command: $(tr '\n' ' ' <"$work/flags")"
    fi
    if [ -s "$work/flags.dropped" ]; then
        say "kube-proxy's flags NOT carried (kube-proxy ignores them when --config is given): $(tr '\n' ' ' <"$work/flags.dropped")"
    fi
    if [ -n "$agent" ]; then
        # shellcheck disable=SC2046 # one flag a line, none with spaces
        if "$agent" --config "$conf" --hostname-override swap-check $(cat "$work/flags") \
            --write-config-to "$work/effective.yaml" >"$work/agent.log" 2>&1; then
            if grep -v 'effective configuration written' "$work/agent.log" | grep -q .; then
                say "the agent ($agent) reads it, and warns (what it accepts but does not act on, and why):"
                grep -v 'effective configuration written' "$work/agent.log" | sed 's/^/  /'
            else
                say "the agent ($agent) reads it and warns about nothing"
            fi
        else
            say "the agent ($agent) REFUSES this configuration; nothing changed:" >&2
            sed 's/^/  /' "$work/agent.log" >&2
            exit 1
        fi
    else
        say "NOT CHECKED: no agent binary here (--agent PATH, \$KUBE_PROXY_IPVS or kube-proxy-ipvs on PATH):" \
            "the configuration is carried as above unchecked; the agent logs what it does not act on when it starts" \
            "(kubectl -n $ns logs daemonset/kube-proxy-ipvs | grep '^W')"
    fi
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
    plan
    mkdir -p "$backup"
    # Saved before anything changes; `back` applies them as they are.
    "$kubectl" -n "$ns" get daemonset kube-proxy -o yaml >"$backup/kube-proxy-daemonset.yaml.tmp"
    "$kubectl" -n "$ns" get configmap kube-proxy -o yaml >"$backup/kube-proxy-configmap.yaml.tmp"
    mv "$backup/kube-proxy-daemonset.yaml.tmp" "$backup/kube-proxy-daemonset.yaml"
    mv "$backup/kube-proxy-configmap.yaml.tmp" "$backup/kube-proxy-configmap.yaml"
    say "kube-proxy's DaemonSet and ConfigMap saved in $backup"

    "$kubectl" -n "$ns" create configmap kube-proxy-ipvs --dry-run=client -o yaml \
        --from-file=config.conf="$conf" --from-file=kubeconfig.conf="$work/kubeconfig.conf" \
        --from-file=sysctls="$work/sysctls" >"$work/configmap.yaml"
    "$kubectl" label --local -f "$work/configmap.yaml" -o yaml app.kubernetes.io/name=kube-proxy-ipvs |
        "$kubectl" apply -f - -f "$here/rbac.yaml"

    "$kubectl" -n "$ns" delete daemonset kube-proxy
    "$kubectl" -n "$ns" delete configmap kube-proxy
    # The image in both containers, the configuration's ports, and kube-proxy's logging flags
    # after the agent's own.
    sed -e "s|image: localhost/kube-proxy-ipvs:dev|image: ${image}|" \
        -e "s|containerPort: 10256$|containerPort: ${health_port}|" \
        -e "s|containerPort: 10249$|containerPort: ${metrics_port}|" "$here/daemonset.yaml" |
        awk -v flags="$work/flags" '
            { print }
            /^ *- --hostname-override=/ {
                pad = $0; sub(/-.*/, "", pad)
                while ((getline f <flags) > 0) { gsub(/\047/, "\047\047", f); print pad "- \047" f "\047" }
            }' | "$kubectl" apply -f -
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
    plan) plan >&2 && cat "$conf" ;;
    to-agent) to_agent ;;
    back) back ;;
    *) usage ;;
esac

#!/usr/bin/env bash
# Every flag the real kube-proxy's --help lists is accepted by the agent: the flag list and
# each flag's type come from that binary (tests/peers/build.sh builds it), so a flag upstream
# adds later fails here until the agent takes it. Each flag is given a valid value (from its
# type, or from the table below where the value must mean something) and the agent runs
# under --dry-run on an empty manifests directory, once as --flag=value and once as
# --flag value; it must exit 0 and say no error. Then every feature gate the help lists is
# accepted, and an unknown gate is refused with exit 2 and kube-proxy's message.
# Usage: tests/check-flags.sh --binary target/debug/kube-proxy-ipvs --kube-proxy target/peers/kube-proxy
set -euo pipefail

binary="" kube_proxy=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --kube-proxy) kube_proxy=$2; shift 2 ;;
        *) echo "usage: $0 --binary AGENT --kube-proxy KUBE_PROXY" >&2; exit 2 ;;
    esac
done
fail() { echo "check-flags: FAIL: $*" >&2; exit 1; }
[[ -x "$binary" ]] || fail "the agent ($binary) is not built"
# Missing peers fail the check: skipping would pass a run that checked nothing.
[[ -x "$kube_proxy" ]] || fail "kube-proxy ($kube_proxy) is not built: run tests/peers/build.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/manifests"
printf 'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n' >"$tmp/config.yaml"
printf 'apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n' >"$tmp/kubeconfig"

"$kube_proxy" --help >"$tmp/help" 2>&1 || fail "kube-proxy --help failed: $(tail -3 "$tmp/help")"

# A value for the flags whose value must be meaningful (by name), then by the help's type.
value_of() {
    local name=$1 type=$2
    case "$name" in
        cleanup | init-only) echo false ;; # true would change the mode away from --dry-run
        version) echo false ;;
        config) echo "$tmp/config.yaml" ;;
        write-config-to) echo "$tmp/written.yaml" ;;
        kubeconfig) echo "$tmp/kubeconfig" ;;
        master) echo https://127.0.0.1:6443 ;;
        hostname-override) echo node-a ;;
        proxy-mode) echo ipvs ;;
        detect-local-mode) echo ClusterCIDR ;;
        cluster-cidr) echo 10.244.0.0/16 ;;
        pod-bridge-interface) echo cbr0 ;;
        pod-interface-name-prefix) echo veth ;;
        ipvs-scheduler) echo wrr ;;
        ipvs-exclude-cidrs) echo 10.0.0.0/8,192.168.0.0/16 ;;
        nodeport-addresses) echo primary ;;
        bind-address) echo 0.0.0.0 ;;
        healthz-bind-address) echo 0.0.0.0:10256 ;;
        metrics-bind-address) echo 127.0.0.1:10249 ;;
        healthz-port) echo 10256 ;;
        metrics-port) echo 10249 ;;
        iptables-masquerade-bit) echo 14 ;;
        oom-score-adj) echo -999 ;;
        conntrack-min) echo 131072 ;;
        conntrack-max-per-core) echo 32768 ;;
        kube-api-content-type) echo application/json ;;
        show-hidden-metrics-for-version) echo 1.36 ;;
        feature-gates) echo KubeProxyIPVS=true,AllBeta=false ;;
        logging-format) echo json ;;
        vmodule) echo 'sync=4,proxier*=2' ;;
        v) echo 2 ;;
        *)
            case "$type" in
                bool) echo true ;;
                duration) echo 10s ;;
                int | int32 | int64 | uint | uint32 | Level) echo 1 ;;
                float32 | float64) echo 5 ;;
                string) echo something ;;
                strings) echo a,b ;;
                quantity) echo 64Ki ;;
                ip) echo 0.0.0.0 ;;
                ipport) echo 0.0.0.0:1234 ;;
                *) return 1 ;;
            esac
            ;;
    esac
}

# pflag's usage lines: "  -v, --v Level   text", "      --cleanup   text" (a bool shows
# no type), "      --version version[=true]   text".
flags=()
types=()
while IFS= read -r line; do
    [[ $line =~ ^\ +(-[a-zA-Z],\ )?--([a-z0-9-]+)(\ ([^ ]+))?(\ \ |$) ]] || continue
    name=${BASH_REMATCH[2]}
    type=${BASH_REMATCH[4]:-bool}
    type=${type%%\[*}
    flags+=("$name")
    types+=("$type")
done <"$tmp/help"
[[ ${#flags[@]} -ge 40 ]] || fail "only ${#flags[@]} flags read from kube-proxy --help: the parser no longer fits its format"
echo "check-flags: ${#flags[@]} flags in kube-proxy $("$kube_proxy" --version 2>/dev/null)'s --help"

base=(--dry-run --manifests "$tmp/manifests" --hostname-override node-a)
failed=()
run() {
    local what=$1; shift
    local code=0
    "$binary" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || code=$?
    if [[ $code -ne 0 ]] || grep -qiE '^error:|unexpected argument|panicked' "$tmp/err"; then
        failed+=("$what (exit $code): $(grep -v '^$' "$tmp/err" | tail -2 | tr '\n' ' ' || true)")
    fi
}
for i in "${!flags[@]}"; do
    name=${flags[$i]} type=${types[$i]}
    case "$name" in
        help) run "--help" --help; continue ;;
    esac
    if ! value=$(value_of "$name" "$type"); then
        failed+=("--$name: no valid value known for its type \"$type\": add one to tests/check-flags.sh")
        continue
    fi
    if [[ $type == bool && $value == true ]]; then
        run "--$name" "${base[@]}" "--$name"
        run "--$name=false" "${base[@]}" "--$name=false"
    elif [[ $type == bool || $name == version ]]; then
        run "--$name=$value" "${base[@]}" "--$name=$value"
    else
        run "--$name=$value" "${base[@]}" "--$name=$value"
        run "--$name $value" "${base[@]}" "--$name" "$value"
    fi
done
# kube-proxy's short form of -v.
run "-v=2" "${base[@]}" -v=2
run "-v 2" "${base[@]}" -v 2

# Every gate the help lists ("  Name=true|false (BETA - default=true)"), at its default.
gates=$(sed -nE 's/^ +([A-Za-z0-9]+)=true\|false \([A-Z]+ - default=(true|false)\).*/\1=\2/p' "$tmp/help" | paste -sd, -)
[[ -n $gates ]] || fail "no feature gates read from kube-proxy --help"
echo "check-flags: $(tr ',' '\n' <<<"$gates" | wc -l) feature gates in the help"
run "--feature-gates=<every gate in the help>" "${base[@]}" "--feature-gates=$gates"
IFS=, read -r -a each <<<"$gates"
for g in "${each[@]}"; do
    name=${g%%=*}
    # Each gate alone, flipped from its default, as an operator would set it.
    flipped=$([[ ${g#*=} == true ]] && echo false || echo true)
    [[ $name == KubeProxyIPVS && $flipped == false ]] && continue # refused on purpose: IPVS off
    run "--feature-gates=$name=$flipped" "${base[@]}" "--feature-gates=$name=$flipped"
done

# An unknown gate is refused as kube-proxy refuses it.
code=0
"$binary" "${base[@]}" --feature-gates=NoSuchGate=true >/dev/null 2>"$tmp/err" || code=$?
[[ $code -eq 2 ]] || failed+=("--feature-gates=NoSuchGate=true: exit $code, not 2")
grep -q 'unrecognized feature gate: NoSuchGate' "$tmp/err" ||
    failed+=("--feature-gates=NoSuchGate=true: no \"unrecognized feature gate\" in: $(tr '\n' ' ' <"$tmp/err")")
# A bad value is an error naming the flag, exit 2, never a panic.
for bad in --log-flush-frequency=soon --v=x --vmodule=sync --logging-format=xml --log-text-info-buffer-size=lots; do
    code=0
    "$binary" "${base[@]}" "$bad" >/dev/null 2>"$tmp/err" || code=$?
    flag=${bad%%=*}
    if [[ $code -ne 2 ]] || ! grep -q -- "${flag#--}" "$tmp/err" || grep -q panicked "$tmp/err"; then
        failed+=("$bad: exit $code, not 2 with the flag named: $(tr '\n' ' ' <"$tmp/err")")
    fi
done

# The flags that do not change what is programmed leave the plan as it was: the example
# Services (tests/demo/manifests) planned with kube-proxy's logging flags, the flags the agent
# warns about and a gate set, against the same plan without them, byte for byte (with
# --masquerade-all among them, this fails).
demo=(--dry-run --manifests "$(dirname "$0")/demo/manifests" --hostname-override node-a)
"$binary" "${demo[@]}" >"$tmp/plain" 2>/dev/null || failed+=("the example plan without flags: exit $?")
grep -q '10.96.0.10' "$tmp/plain" || failed+=("the example plan has no 10.96.0.10: nothing to compare")
same_plan=(--v=4 '--vmodule=proxier*=4,sync=2' --logging-format=json --log-flush-frequency=10s
    --log-text-split-stream --log-text-info-buffer-size=64Ki --log-json-split-stream
    --log-json-info-buffer-size=64Ki --profiling --config-sync-period=1m
    --iptables-sync-period=10s --iptables-min-sync-period=2s --iptables-localhost-nodeports=false
    --kube-api-content-type=application/json --show-hidden-metrics-for-version=1.36
    '--feature-gates=KubeProxyIPVS=true,AllBeta=false')
"$binary" "${demo[@]}" "${same_plan[@]}" >"$tmp/flagged" 2>"$tmp/err" ||
    failed+=("the example plan with kube-proxy's logging and warned flags: exit $?: $(tail -2 "$tmp/err" | tr '\n' ' ')")
if ! cmp -s "$tmp/plain" "$tmp/flagged"; then
    changed=$(diff "$tmp/plain" "$tmp/flagged" | head -5 | tr '\n' ' ' || true)
    failed+=("kube-proxy's logging and warned flags changed the plan: $changed")
fi

if [[ ${#failed[@]} -gt 0 ]]; then
    printf '  %s\n' "${failed[@]}" >&2
    fail "${#failed[@]} of kube-proxy's flags or values not taken as kube-proxy takes them"
fi
echo "check-flags: every flag of kube-proxy's --help accepted"

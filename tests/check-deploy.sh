#!/bin/bash
# What CI can check of deploy/ and vagrant/ without a cluster or a box:
#   1. the Vagrantfile parses (ruby -c);
#   2. every shell script in deploy/, vagrant/, tests/ and tests/peers/ passes shellcheck;
#   3. the Kubernetes manifests in deploy/ validate against the Kubernetes schemas, strictly
#      (unknown fields are errors), offline (kubernetes-validate from PyPI ships them);
#   4. the ConfigMap's KubeProxyConfiguration is accepted by the agent itself
#      (--write-config-to), when a kube-proxy-ipvs binary is built;
#   5. the init container's sysctl script does what the agent wants on a fake /proc/sys, and
#      refuses hostile lines (tests/init-sysctls-test.sh).
# Installs ruby and shellcheck (apt-get) and kubernetes-validate (pip) when missing; needs
# root for that. Exits non-zero on any failure, after a one-line summary per check.
#
#   tests/check-deploy.sh [--binary PATH]
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
binary=
[ "${1:-}" = "--binary" ] && binary=${2:-}
k8s_version=${CHECK_DEPLOY_K8S_VERSION:-1.33.0}

results=()
failures=0
record() { # name status detail
    results+=("$(printf '%-5s %-22s %s' "$2" "$1" "$3")")
    [ "$2" = FAIL ] && failures=$((failures + 1))
    return 0
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- tools
need_apt=()
command -v ruby >/dev/null || need_apt+=(ruby)
command -v shellcheck >/dev/null || need_apt+=(shellcheck)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing ${need_apt[*]} (apt-get)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"; } >"$tmp/apt.log" 2>&1 ||
        { cat "$tmp/apt.log" >&2; echo "cannot install ${need_apt[*]}" >&2; exit 1; }
fi
python=$(command -v python3 || true)
if [ -z "$python" ]; then
    echo "python3 is missing" >&2
    exit 1
fi
if ! "$python" -c 'import kubernetes_validate' 2>/dev/null; then
    echo "installing kubernetes-validate (pip)"
    "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore kubernetes-validate >"$tmp/pip.log" 2>&1 ||
        "$python" -m pip install -q --disable-pip-version-check --break-system-packages kubernetes-validate >>"$tmp/pip.log" 2>&1 ||
        { cat "$tmp/pip.log" >&2; echo "cannot install kubernetes-validate" >&2; exit 1; }
fi

# ---- 1. Vagrantfile
if out=$(ruby -c vagrant/Vagrantfile 2>&1); then
    record vagrantfile PASS "ruby -c vagrant/Vagrantfile"
else
    echo "$out"
    record vagrantfile FAIL "ruby -c vagrant/Vagrantfile: $out"
fi

# ---- 2. shellcheck
mapfile -t scripts < <({
    find deploy vagrant -type f -name '*.sh' -not -path '*/.vagrant/*' -not -path '*/.build/*'
    find tests -type f -name '*.sh' -not -path 'tests/lab/debs/*'
} | sort -u)
bad=()
for s in "${scripts[@]}"; do
    shellcheck -x "$s" || bad+=("$s")
done
if [ ${#bad[@]} -eq 0 ]; then
    record shellcheck PASS "${#scripts[@]} scripts"
else
    record shellcheck FAIL "${bad[*]}"
fi

# ---- 3. manifests against the Kubernetes schemas (kubernetes-validate works offline)
mapfile -t manifests < <(find deploy -maxdepth 1 -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
if [ ${#manifests[@]} -eq 0 ]; then
    record manifests FAIL "no manifests in deploy/"
elif "$python" -m kubernetes_validate --strict --quiet -k "$k8s_version" "${manifests[@]}"; then
    record manifests PASS "${#manifests[@]} files, strict, Kubernetes $k8s_version"
else
    record manifests FAIL "kubernetes-validate --strict -k $k8s_version ${manifests[*]}"
fi

# ---- 4. the KubeProxyConfiguration, read by the agent
extract() { # key -> the ConfigMap's data[key] with the placeholders filled in
    "$python" - "$1" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open("deploy/configmap.yaml")):
    if doc and doc.get("kind") == "ConfigMap":
        text = doc["data"][sys.argv[1]]
        print(text.replace("CLUSTER_CIDR_PLACEHOLDER", "10.244.0.0/16")
                  .replace("APISERVER_PLACEHOLDER", "https://192.0.2.10:6443"), end="")
PY
}
if [ -z "$binary" ]; then
    for b in target/release/kube-proxy-ipvs target/debug/kube-proxy-ipvs; do
        if [ -x "$b" ] && "$b" --help 2>/dev/null | grep -q -- '--write-config-to'; then
            binary=$b
            break
        fi
    done
fi
if ! extract config.conf >"$tmp/config.conf" 2>"$tmp/extract.log"; then
    record kube-proxy-config FAIL "cannot read data[config.conf]: $(cat "$tmp/extract.log")"
elif [ -z "$binary" ]; then
    record kube-proxy-config SKIP "no kube-proxy-ipvs binary with --write-config-to (build it, or --binary PATH)"
elif out=$("$binary" --config "$tmp/config.conf" --hostname-override check-deploy \
    --write-config-to "$tmp/effective.yaml" 2>&1) && grep -q 'mode: ipvs' "$tmp/effective.yaml"; then
    record kube-proxy-config PASS "$binary accepts data[config.conf]"
else
    echo "$out"
    record kube-proxy-config FAIL "$binary --config data[config.conf]: $out"
fi

# ---- 5. the init container's sysctl script on a fake /proc/sys
fake=$tmp/proc-sys
mkdir -p "$fake/net/ipv4/vs" "$fake/net/netfilter"
for k in net/ipv4/ip_forward net/ipv4/vs/conntrack net/ipv4/vs/expire_nodest_conn \
    net/ipv4/vs/expire_quiescent_template net/netfilter/nf_conntrack_max; do
    echo 0 >"$fake/$k"
done
extract sysctls >"$tmp/sysctls"
want_max=$((32768 * $(nproc)))
[ "$want_max" -ge 131072 ] || want_max=131072
# MODPROBE: the host's modules are not this check's to load.
if PROC_SYS=$fake MODPROBE=true sh deploy/init-sysctls.sh "$tmp/sysctls" >"$tmp/sysctls.log" 2>&1 &&
    [ "$(cat "$fake/net/ipv4/vs/conntrack")" = 1 ] &&
    [ "$(cat "$fake/net/ipv4/ip_forward")" = 1 ] &&
    [ "$(cat "$fake/net/netfilter/nf_conntrack_max")" = "$want_max" ] &&
    rm -r "$fake/net/ipv4/vs" &&
    ! PROC_SYS=$fake MODPROBE=false sh deploy/init-sysctls.sh "$tmp/sysctls" >>"$tmp/sysctls.log" 2>&1 &&
    grep -q 'ip_vs module is not loaded' "$tmp/sysctls.log"; then
    record init-sysctls PASS "writes the list; fails clearly without ip_vs"
else
    cat "$tmp/sysctls.log"
    record init-sysctls FAIL "deploy/init-sysctls.sh on a fake /proc/sys"
fi
if out=$(bash tests/init-sysctls-test.sh 2>&1); then
    record init-sysctls-hostile PASS "${out#init-sysctls-test: }"
else
    echo "$out"
    record init-sysctls-hostile FAIL "tests/init-sysctls-test.sh"
fi

echo
echo "check-deploy:"
printf '  %s\n' "${results[@]}"
if [ "$failures" -gt 0 ]; then
    echo "check-deploy: $failures check(s) failed"
    exit 1
fi
echo "check-deploy: ok"

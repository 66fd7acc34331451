#!/bin/bash
# What CI can check of deploy/ and vagrant/ without a cluster or a box:
#   1. the Vagrantfile parses (ruby -c);
#   2. every shell script in deploy/, vagrant/, tests/ and tests/peers/ passes shellcheck;
#   3. the Kubernetes manifests in deploy/ validate against the Kubernetes schemas, strictly
#      (unknown fields are errors), offline (kubernetes-validate from PyPI ships them);
#   4. the ConfigMap's KubeProxyConfiguration is accepted by the agent itself
#      (--write-config-to), when a kube-proxy-ipvs binary is built;
#   5. the init container's sysctl script does what the agent wants on a fake /proc/sys, and
#      refuses hostile lines (tests/init-sysctls-test.sh);
#   6. the Helm chart (deploy/chart): helm lint; deploy/rbac.yaml, configmap.yaml and
#      daemonset.yaml are its rendering with the default values (deploy/render.sh --check);
#      rendered with other values (a digest, strict ARP, another health port, the
#      ServiceMonitor) it validates, the probes follow the health port and the init container
#      writes the strict-ARP sysctls;
#   7. deploy/ as a kustomize base: the overlay of deploy/README.md (tests/deploy/overlay)
#      gives the operator's image and configuration, no placeholder left, and validates.
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
mapfile -t manifests < <(find deploy -maxdepth 1 -type f \( -name '*.yaml' -o -name '*.yml' \) -not -name kustomization.yaml | sort)
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
# MODPROBE, SYS_MODULE, KERNEL_RELEASE: the host's modules and their parameters are not this
# check's to load or write.
if PROC_SYS=$fake SYS_MODULE=$tmp/sys-module KERNEL_RELEASE=6.1.0 MODPROBE=true sh deploy/init-sysctls.sh "$tmp/sysctls" >"$tmp/sysctls.log" 2>&1 &&
    [ "$(cat "$fake/net/ipv4/vs/conntrack")" = 1 ] &&
    [ "$(cat "$fake/net/ipv4/ip_forward")" = 1 ] &&
    [ "$(cat "$fake/net/netfilter/nf_conntrack_max")" = "$want_max" ] &&
    rm -r "$fake/net/ipv4/vs" &&
    ! PROC_SYS=$fake SYS_MODULE=$tmp/sys-module KERNEL_RELEASE=6.1.0 MODPROBE=false sh deploy/init-sysctls.sh "$tmp/sysctls" >>"$tmp/sysctls.log" 2>&1 &&
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

# ---- 6. the Helm chart
helm=${HELM:-$repo/target/tools/helm-v3.22.0/helm}
if ! out=$(bash deploy/render.sh --check 2>&1); then
    echo "$out"
    record chart-render FAIL "deploy/render.sh --check"
else
    record chart-render PASS "deploy/{rbac,configmap,daemonset}.yaml are the chart's rendering"
fi
if out=$("$helm" lint --strict deploy/chart 2>&1); then
    record chart-lint PASS "helm lint --strict deploy/chart"
else
    echo "$out"
    record chart-lint FAIL "helm lint --strict deploy/chart"
fi
"$helm" template kube-proxy-ipvs deploy/chart --namespace kube-system \
    --set image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef \
    --set config.ipvs.strictARP=true --set config.healthzBindAddress=0.0.0.0:10266 \
    --set config.metricsBindAddress=0.0.0.0:10249 --set metrics.serviceMonitor.enabled=true \
    --set apiServer=https://192.0.2.10:6443 --set config.clusterCIDR=10.244.0.0/16 >"$tmp/values.yaml" 2>"$tmp/helm.log"
"$python" - "$tmp/values.yaml" "$tmp/core.yaml" >"$tmp/values.log" 2>&1 <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = {d["kind"]: d for d in docs}
ds = kinds["DaemonSet"]["spec"]["template"]["spec"]
agent = ds["containers"][0]
ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
assert ports == {"healthz": 10266, "metrics": 10249}, ports
assert agent["livenessProbe"]["httpGet"]["port"] == "healthz", agent["livenessProbe"]
assert agent["readinessProbe"]["httpGet"]["port"] == "healthz", agent["readinessProbe"]
image = "localhost/kube-proxy-ipvs@sha256:" + "0123456789abcdef" * 4
assert agent["image"] == image and ds["initContainers"][0]["image"] == image
config = yaml.safe_load(kinds["ConfigMap"]["data"]["config.conf"])
assert config["mode"] == "ipvs" and config["ipvs"]["strictARP"] is True and config["healthzBindAddress"] == "0.0.0.0:10266"
sysctls = kinds["ConfigMap"]["data"]["sysctls"].split()
assert "net/ipv4/conf/all/arp_ignore=1" in sysctls and "net/ipv4/conf/all/arp_announce=2" in sysctls, sysctls
assert kinds["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"
# The Kubernetes objects only: the schemas below have no ServiceMonitor.
yaml.safe_dump_all([d for d in docs if d["kind"] != "ServiceMonitor"], open(sys.argv[2], "w"))
PY
if [ -s "$tmp/core.yaml" ] && "$python" -m kubernetes_validate --strict --quiet -k "$k8s_version" "$tmp/core.yaml" >>"$tmp/values.log" 2>&1; then
    record chart-values PASS "digest, strict ARP, health port 10266, ServiceMonitor: valid, probes follow"
else
    cat "$tmp/helm.log" "$tmp/values.log"
    record chart-values FAIL "helm template with other values"
fi
if "$helm" template kube-proxy-ipvs deploy/chart --set metrics.serviceMonitor.enabled=true >/dev/null 2>"$tmp/helm.log" ||
    ! grep -q 'needs config.metricsBindAddress' "$tmp/helm.log"; then
    cat "$tmp/helm.log"
    record chart-refusal FAIL "a ServiceMonitor on a loopback metrics address must be refused"
else
    record chart-refusal PASS "a ServiceMonitor on loopback metrics is refused, saying why"
fi

# ---- 7. deploy/ as a kustomize base, with the overlay deploy/README.md shows
kubectl=$repo/target/peers/kubectl
if [ ! -x "$kubectl" ]; then
    record kustomize SKIP "no target/peers/kubectl (tests/peers/build.sh)"
elif "$kubectl" kustomize tests/deploy/overlay >"$tmp/kustomized.yaml" 2>"$tmp/kustomize.log" &&
    ! grep -q PLACEHOLDER "$tmp/kustomized.yaml" &&
    [ "$(grep -c 'image: registry.example.com/kube-proxy-ipvs:0.1.0' "$tmp/kustomized.yaml")" = 2 ] &&
    "$python" -m kubernetes_validate --strict --quiet -k "$k8s_version" "$tmp/kustomized.yaml" >>"$tmp/kustomize.log" 2>&1; then
    record kustomize PASS "tests/deploy/overlay: the operator's image and configuration, valid"
else
    cat "$tmp/kustomize.log"
    record kustomize FAIL "kubectl kustomize tests/deploy/overlay"
fi

echo
echo "check-deploy:"
printf '  %s\n' "${results[@]}"
if [ "$failures" -gt 0 ]; then
    echo "check-deploy: $failures check(s) failed"
    exit 1
fi
echo "check-deploy: ok"

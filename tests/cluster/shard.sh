#!/bin/bash
# One or more shards of the e2e comparison (tests/cluster/shards.txt), each run for kube-proxy
# (IPVS mode) and then the agent, one after the other, each on a fresh lab cluster of the same
# build (run.sh); each run becomes a record in tests/cluster/results/SHARD.PROXY.json
# (report.py record: the commit, the agent's commit, every image's ID, each test's result), or
# with --cni flannel on flannel's VXLAN overlay, in tests/cluster/results/flannel/.
# A shard takes at most about an hour per proxy; nothing else should run on the machine.
#
#   tests/cluster/shard.sh [--proxy agent|kube-proxy|both] [--nodes N] [--cni bridge|flannel]
#                          [--keep-failed] SHARD...
#   tests/cluster/shard.sh --list
#
# Then tests/cluster/e2e.sh --page writes E2E.md from every record of the same build
# (e2e.sh --cni flannel --page: E2E-flannel.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
proxies=(kube-proxy agent) nodes=2 cni=bridge extra=() names=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --proxy)
            case $2 in both) proxies=(kube-proxy agent) ;; agent | kube-proxy) proxies=("$2") ;;
                *) echo "shard: --proxy is agent, kube-proxy or both" >&2; exit 2 ;; esac
            shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --cni)
            case $2 in bridge | flannel) cni=$2 ;;
                *) echo "shard: --cni is bridge or flannel" >&2; exit 2 ;; esac
            shift 2 ;;
        --keep-failed) extra+=(--keep-failed); shift ;;
        --list) grep -v '^#' "$here/shards.txt" | awk 'NF {print $1}'; exit 0 ;;
        -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
        -*) echo "shard: unknown argument $1 (see --help)" >&2; exit 2 ;;
        *) names+=("$1"); shift ;;
    esac
done
[[ ${#names[@]} -gt 0 ]] || { echo "shard: which shard? (--list)" >&2; exit 2; }
# Every shard of this agent build on the same images (frozen-images.sh says why).
CLUSTER_IMAGES=$(bash "$here/frozen-images.sh" | tail -1)
export CLUSTER_IMAGES
# The bridge's records where they always were; another CNI's beside them, merged apart.
results=$here/results runs=$root/target/cluster/shards
[[ $cni == bridge ]] || results+=/$cni runs+=/$cni
mkdir -p "$results"
rc=0
for name in "${names[@]}"; do
    line=$(awk -v n="$name" '!/^#/ && $1 == n' "$here/shards.txt")
    [[ -n $line ]] || { echo "shard: no shard $name in tests/cluster/shards.txt" >&2; exit 2; }
    read -r _ procs focus <<<"$line"
    for proxy in "${proxies[@]}"; do
        out=$runs/$name/$proxy
        echo "shard: $name, $proxy, $cni CNI, $procs ginkgo processes: $focus" >&2
        # A failed test is a result: the record is written either way.
        bash "$here/run.sh" --proxy "$proxy" --nodes "$nodes" --cni "$cni" --procs "$procs" \
            --focus "$focus" --out "$out" "${extra[@]}" || true
        if [[ -f $out/run.json ]]; then
            python3 "$here/report.py" record "$out" --shard "$name" \
                --out "$results/$name.$proxy.json" || rc=1
        else
            echo "shard: $name, $proxy: the run did not reach its tests (see $out)" >&2
            rc=1
        fi
    done
done
exit "$rc"

#!/bin/bash
# The whole e2e comparison on the lab cluster (two nodes): every shard of
# tests/cluster/shards.txt for kube-proxy (IPVS mode) and then the agent (shard.sh; about an
# hour per shard and proxy, so it is usually run shard by shard, on different days), then
# tests/cluster/E2E.md from the records of one build (report.py page). Exits non-zero when
# the agent fails a test kube-proxy passes, or when the records do not name one build.
#
#   tests/cluster/e2e.sh [--nodes 1|2]     every shard, the swap, then the page
#   tests/cluster/e2e.sh --swap            the swap under traffic alone, then the page
#   tests/cluster/e2e.sh --page            the page from the records already committed
#   tests/cluster/e2e.sh --cni flannel ... the same on flannel's VXLAN overlay: its records in
#                                          tests/cluster/results/flannel/, its page
#                                          tests/cluster/E2E-flannel.md, no swap
#
# The swap (run.sh --swap --no-e2e) keeps its section and run.json in
# tests/cluster/results/swap/. tests/cluster/explain.md (the failures' explanations, from
# their captured state) goes on the page.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
nodes=2 run=1 swap=1 cni=bridge
while [[ $# -gt 0 ]]; do
    case $1 in
        --nodes) nodes=$2; shift 2 ;;
        --page) run=0 swap=0; shift ;;
        --swap) run=0 swap=1; shift ;;
        --cni) cni=$2; shift 2 ;;
        *) sed -n '2,17p' "$0" >&2; exit 2 ;;
    esac
done
results=$here/results page=$here/E2E.md
case $cni in
    bridge) ;;
    # The swap's evidence is the bridge's: a proxy swap, not an overlay's.
    flannel) results+=/flannel page=$here/E2E-flannel.md swap=0 ;;
    *) echo "e2e: --cni is bridge or flannel" >&2; exit 2 ;;
esac
rc=0
if [[ $run == 1 ]]; then
    mapfile -t shards < <(bash "$here/shard.sh" --list)
    bash "$here/shard.sh" --nodes "$nodes" --cni "$cni" "${shards[@]}" || rc=$?
fi
if [[ $swap == 1 ]]; then
    CLUSTER_IMAGES=$(bash "$here/frozen-images.sh" | tail -1)
    export CLUSTER_IMAGES
    bash "$here/run.sh" --proxy kube-proxy --nodes "$nodes" --swap --no-e2e \
        --out "$root/target/cluster/swap" || rc=$?
    if [[ -f $root/target/cluster/swap/swap/swap.md ]]; then
        mkdir -p "$here/results/swap"
        cp "$root/target/cluster/swap/swap/swap.md" "$root/target/cluster/swap/swap/run.json" \
            "$here/results/swap/"
    fi
fi
extra=()
[[ -f $here/explain.md ]] && extra+=(--explain "$here/explain.md")
[[ $cni != bridge || ! -f $results/swap/swap.md ]] || extra+=(--swap "$results/swap")
python3 "$here/report.py" page "$results"/*.json --shards "$here/shards.txt" \
    --skip-file "$here/skip.txt" "${extra[@]}" --out "$page" || rc=$?
echo "e2e: ${page#"$root"/} written (exit $rc)" >&2
exit "$rc"

#!/bin/bash
# Network programming latency on the two-node lab cluster, side by side: the agent, kube-proxy
# in IPVS mode and kube-proxy in nftables mode, each at the sizes asked (Services without
# pods present besides the measured ones), each a fresh cluster of the same build (run.sh
# --latency N --services M --no-e2e, the images frozen for the agent's commit as the e2e
# shards' are). Each run becomes a record in tests/cluster/results/latency/PROXY.M.json
# (latency_report.py record); then latency_report.py page writes BENCHMARKS.md's first table
# and the keys of bench/results.json from every record of one build. A run takes about 30-50
# minutes under emulation, so the nine are run a few at a time, on different days if need be.
#
#   tests/cluster/latency.sh [--proxy agent|kube-proxy|kube-proxy-nftables|all]
#                            [--services 0,1000,5000] [--changes 200] [--every 2]
#   tests/cluster/latency.sh --page     the table from the records already committed
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
proxies=(agent kube-proxy kube-proxy-nftables) sizes=(0 1000 5000) changes=200 every=2 run=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --proxy)
            case $2 in all) ;; agent | kube-proxy | kube-proxy-nftables) proxies=("$2") ;;
                *) echo "latency: --proxy is agent, kube-proxy, kube-proxy-nftables or all" >&2; exit 2 ;; esac
            shift 2 ;;
        --services) IFS=, read -ra sizes <<<"$2"; shift 2 ;;
        --changes) changes=$2; shift 2 ;;
        --every) every=$2; shift 2 ;;
        --page) run=0; shift ;;
        -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "latency: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
results=$here/results/latency
mkdir -p "$results"
rc=0
if [[ $run == 1 ]]; then
    CLUSTER_IMAGES=$(bash "$here/frozen-images.sh" | tail -1)
    export CLUSTER_IMAGES
    for size in "${sizes[@]}"; do
        for proxy in "${proxies[@]}"; do
            out=$root/target/cluster/latency/$proxy-$size
            rm -rf "$out"
            echo "latency: $proxy, $size Services besides, $changes changes of each kind" >&2
            # A probe never answered is a result: the record is written either way.
            LATENCY_EVERY=$every bash "$here/run.sh" --proxy "$proxy" --nodes 2 --no-e2e \
                --latency "$changes" --services "$size" --out "$out" || true
            if [[ -f $out/latency/run.json && -f $out/latency/latency.json ]]; then
                python3 "$here/latency_report.py" record "$out" \
                    --out "$results/$proxy.$size.json" || rc=1
            else
                echo "latency: $proxy, $size: the run did not reach its measurements (see $out)" >&2
                rc=1
            fi
        done
    done
fi
if compgen -G "$results/*.json" >/dev/null; then
    python3 "$here/latency_report.py" page "$results"/*.json --benchmarks BENCHMARKS.md \
        --results bench/results.json || rc=$?
fi
exit "$rc"

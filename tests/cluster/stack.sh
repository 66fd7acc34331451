#!/bin/bash
# The stack's comparison: MetalLB layer 2 on the two-node lab cluster, its LoadBalancer
# Services asked from outside (tests/cluster/lb-traffic.sh), for kube-proxy (IPVS mode) and
# the agent, with strictARP on and then off (the failure it prevents, so that the ARP check
# can fail). Each run is a fresh cluster of the same build (run.sh --lb metallb --no-e2e, the
# images frozen for the agent's commit as the e2e shards' are) and becomes a record in
# tests/cluster/results/stack/PROXY.strictARP-on|off.json (stack_report.py record); then
# tests/cluster/STACK.md is written from every record (stack_report.py page). About 15
# minutes per run under emulation; nothing else should run on the machine.
# With --e2e, the strictARP-on runs also run Kubernetes' own `[sig-network] LoadBalancers`
# tests against MetalLB's addresses (skip.txt without its LoadBalancer line), recorded by
# report.py as shard "loadbalancers" in results/stack/loadbalancers.PROXY.json.
#
#   tests/cluster/stack.sh [--proxy agent|kube-proxy|both] [--strict-arp on|off|both] [--e2e]
#   tests/cluster/stack.sh --page     the page from the records already committed
#
# Exits non-zero when a run did not reach its checks, or the agent fails a check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
proxies=(kube-proxy agent) settings=(on off) run=1 e2e=0
lb_focus='\[sig-network\] LoadBalancers'
lb_skip=$(grep -v '^#' "$here/skip.txt" | grep -v '^LoadBalancer' | sed 's/ *#.*//' | grep . | paste -sd'|')
while [[ $# -gt 0 ]]; do
    case $1 in
        --proxy)
            case $2 in both) proxies=(kube-proxy agent) ;; agent | kube-proxy) proxies=("$2") ;;
                *) echo "stack: --proxy is agent, kube-proxy or both" >&2; exit 2 ;; esac
            shift 2 ;;
        --strict-arp)
            case $2 in both) settings=(on off) ;; on | off) settings=("$2") ;;
                *) echo "stack: --strict-arp is on, off or both" >&2; exit 2 ;; esac
            shift 2 ;;
        --page) run=0; shift ;;
        --e2e) e2e=1; shift ;;
        -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "stack: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
results=$here/results/stack
mkdir -p "$results"
rc=0
if [[ $run == 1 ]]; then
    # MetalLB's programs first: images.sh (through frozen-images.sh) makes their images
    # only once they exist.
    bash "$here/metallb/build.sh" >/dev/null
    CLUSTER_IMAGES=$(bash "$here/frozen-images.sh" | tail -1)
    export CLUSTER_IMAGES
    for strict in "${settings[@]}"; do
        for proxy in "${proxies[@]}"; do
            out=$root/target/cluster/stack/$proxy-strictARP-$strict
            rm -rf "$out"
            echo "stack: $proxy, strictARP $strict" >&2
            tests=(--no-e2e)
            # Two ginkgo processes, as the e2e shards (shards.txt says why).
            [[ $e2e == 0 || $strict == off ]] || tests=(--procs 2 --focus "$lb_focus" --skip "$lb_skip")
            # A failed check or test is a result: the records are written either way.
            bash "$here/run.sh" --proxy "$proxy" --nodes 2 --lb metallb --strict-arp "$strict" \
                "${tests[@]}" --out "$out" || true
            if [[ ${tests[0]} != --no-e2e ]]; then
                if [[ -f $out/run.json ]]; then
                    python3 "$here/report.py" record "$out" --shard loadbalancers \
                        --out "$results/loadbalancers.$proxy.json" || rc=1
                else
                    echo "stack: $proxy: the LoadBalancers tests did not run (see $out)" >&2
                    rc=1
                fi
            fi
            if [[ -f $out/lb/run.json && -f $out/lb/lb.json ]]; then
                python3 "$here/stack_report.py" record "$out" \
                    --out "$results/$proxy.strictARP-$strict.json" || rc=1
            else
                echo "stack: $proxy, strictARP $strict: the run did not reach its checks (see $out)" >&2
                rc=1
            fi
        done
    done
fi
e2e_records=()
for f in "$results"/loadbalancers.*.json; do [[ -e $f ]] && e2e_records+=(--e2e "$f"); done
python3 "$here/stack_report.py" page "$results"/*.strictARP-*.json "${e2e_records[@]}" \
    --out "$here/STACK.md" || rc=$?
echo "stack: tests/cluster/STACK.md written (exit $rc)" >&2
exit "$rc"

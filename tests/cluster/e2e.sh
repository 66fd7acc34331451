#!/bin/bash
# The whole e2e comparison on the lab cluster (two nodes): Kubernetes' Services and
# Networking service tests against upstream kube-proxy in IPVS mode, then the swap under
# traffic (to the agent, the Conformance Services tests on the swapped cluster, back), then
# the same tests against the agent installed from deploy/ on a fresh cluster; writes
# tests/cluster/E2E.md from the junit reports (tests/cluster/report.py) and the swap's
# figures to target/cluster/out/kube-proxy/swap.md. Exits non-zero when the agent fails a
# test kube-proxy passes, or a request failed during a swap.
#
#   tests/cluster/e2e.sh [--nodes 1|2] [--explain FILE]
#
#   --explain  a markdown file with the explanation of each failing test, appended to E2E.md
#              (tests/cluster/explain.md holds the last run's: update it from the new logs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
nodes=2 explain=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --nodes) nodes=$2; shift 2 ;;
        --explain) explain=(--explain "$2"); shift 2 ;;
        *) sed -n '2,12p' "$0" >&2; exit 2 ;;
    esac
done
out=$root/target/cluster/out
rc=0
bash "$here/run.sh" --proxy kube-proxy --nodes "$nodes" --swap --out "$out/kube-proxy" || rc=$?
bash "$here/run.sh" --proxy agent --nodes "$nodes" --out "$out/agent" || rc=$?
python3 "$here/report.py" --kube-proxy "$out/kube-proxy" --agent "$out/agent" \
    --skip-file "$here/skip.txt" --commit "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates deploy tests/cluster || echo ' with local changes')" \
    --nodes "$nodes" --swap "$out/kube-proxy/swap.md" "${explain[@]}" --out "$here/E2E.md" || rc=$?
echo "e2e: tests/cluster/E2E.md written (exit $rc)" >&2
exit "$rc"

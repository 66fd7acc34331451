#!/usr/bin/env bash
# The whole differential corpus: builds the upstream peers, starts the real control plane,
# runs every scenario (or PEERS_SCENARIOS=ci|all|prefix,...) in the lab VM with upstream
# kube-proxy and the agent side by side, prints the table and, for a full run, writes it to
# tests/peers/RESULTS.md. Exits non-zero when a scenario errs or differs unlisted.
set -uo pipefail
cd "$(dirname "$0")/../.."
bash tests/setup.sh
tests/peers/build.sh >/dev/null || exit 1
export PEERS_SCENARIOS=${PEERS_SCENARIOS:-all}
log=$(mktemp)
start=$(date +%s)
# The agent's package is listed for its binary (the payload carries the workspace's programs);
# the filter runs only the corpus test.
cargo run --quiet -p lab -- test --release --memory 2048 -p peers -p kube-proxy-ipvs-agent \
    -- differential_corpus --nocapture 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
took=$(($(date +%s) - start))
table=$(sed -n '/^=== peers results begin ===$/,/^=== peers results end ===$/p' "$log" | sed '1d;$d')
if [[ -z "$table" ]]; then
    echo "corpus: no results table in the output" >&2
    exit 1
fi
if [[ "$PEERS_SCENARIOS" == all ]]; then
    kernel=$(grep -o 'guest kernel [^ ,]*' "$log" | head -1 | cut -d' ' -f3)
    {
        echo "# Differential corpus: upstream kube-proxy and the agent side by side"
        echo
        echo "Latest full run of \`./tests/peers/corpus.sh\` ($(date -u +%Y-%m-%d), ${took} s in the lab VM,"
        echo "kernel ${kernel:-unknown}, kube-proxy and kube-apiserver v1.37.2 from tests/peers/go.mod)."
        echo "Each scenario of \`tests/peers/scenarios/\` runs upstream \`kube-proxy --proxy-mode=ipvs\` and"
        echo "\`kube-proxy-ipvs\` as the same node in two network namespaces against one real API server; the"
        echo "kernel state is compared at start and after every step. \"differences\" counts the lines that"
        echo "differ over all those points, with the README markers (\"Where it differs\") that explain them;"
        echo "\"listed only\" means every difference is one the README lists and explains."
        echo
        echo "$table"
    } > tests/peers/RESULTS.md
    echo "corpus: wrote tests/peers/RESULTS.md" >&2
fi
echo "corpus: ${took}s, exit $rc" >&2
exit "$rc"

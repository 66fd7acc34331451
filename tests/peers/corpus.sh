#!/usr/bin/env bash
# The whole differential corpus: builds the upstream peers, starts the real control plane,
# runs every scenario (or PEERS_SCENARIOS=ci|all|prefix,...) in the lab VM with upstream
# kube-proxy and the agent side by side, prints the table and, for a full run that passed,
# writes it to tests/peers/RESULTS.md stamped with the agent's commit, the peers' versions,
# the date and each scenario's time; a run that failed, or any partial run, writes nothing.
# PEERS_JOBS=N (default 2) runs N lab VMs at once, each with its own control plane and an
# interleaved share of the scenarios (each VM may run two hours: a loaded machine took 3,500 s
# for half of the 106 scenarios). Exits non-zero when a scenario errs or differs unlisted.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bash tests/setup.sh
tests/peers/build.sh >/dev/null || exit 1
which=${PEERS_SCENARIOS:-all}
jobs=${PEERS_JOBS:-2}
if [[ "$which" == all ]]; then
    mapfile -t ids < <(find tests/peers/scenarios -maxdepth 1 -name '*.yaml' -printf '%f\n' | sed 's/\.yaml$//' | sort)
else
    jobs=1
fi
# The commit the run tests: taken before the build, since the tree may move on while the
# VMs run (the stamp once named a later commit than the one built).
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- crates tests/peers README.md || commit+=" with local changes"
# Build once, before the VMs start (they would wait on cargo's lock in turn).
cargo build --quiet -p lab
cargo test --quiet --no-run --all-features --profile labtest -p peers -p kube-proxy-ipvs-agent 2>/dev/null
start=$(date +%s)
logs=()
for ((j = 0; j < jobs; j++)); do
    if [[ "$which" == all ]]; then
        share=$(for ((i = j; i < ${#ids[@]}; i += jobs)); do echo "${ids[i]}"; done | paste -sd,)
    else
        share=$which
    fi
    log=$(mktemp)
    logs+=("$log")
    # The agent's package is listed for its binary (the payload carries the workspace's
    # programs); the filter runs only the corpus test.
    PEERS_SCENARIOS=$share cargo run --quiet -p lab -- test --release --memory 2048 --timeout 7200 \
        -p peers -p kube-proxy-ipvs-agent -- differential_corpus --nocapture >"$log" 2>&1 &
done
tail -q -f "${logs[@]}" --pid=$$ 2>/dev/null | grep --line-buffered -E '^peers: |^\| |^lab: ' &
rc=0
for ((j = 0; j < jobs; j++)); do
    wait -n 2>/dev/null || rc=1
done
took=$(($(date +%s) - start))
rows=() details=""
for log in "${logs[@]}"; do
    table=$(sed -n '/^=== peers results begin ===$/,/^=== peers results end ===$/p' "$log" | sed '1d;$d')
    if [[ -z "$table" ]]; then
        echo "corpus: no results table in $log:" >&2
        tail -30 "$log" >&2
        rc=1
        continue
    fi
    while IFS= read -r l; do rows+=("$l"); done < <(grep -E '^\| [0-9]' <<<"$table")
    details+=$(awk '/^### /{p=1} p' <<<"$table")$'\n'
done
table=$(printf '| scenario | steps | differences | verdict | time |\n|---|---|---|---|---|\n'; printf '%s\n' "${rows[@]}" | sort)
table+=$'\n'$details
echo "$table"
if [[ "$which" == all && ${#rows[@]} -ne ${#ids[@]} ]]; then
    echo "corpus: ${#rows[@]} results for ${#ids[@]} scenarios" >&2
    rc=1
fi
if [[ "$which" == all && $rc != 0 ]]; then
    echo "corpus: the run failed: tests/peers/RESULTS.md left as it was" >&2
elif [[ "$which" == all ]]; then
    kubernetes=$(awk '$1 == "k8s.io/kubernetes" {print $2}' tests/peers/go.mod)
    etcd=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' tests/peers/go.mod)
    kernel=$(grep -ho 'guest kernel [^ ,]*' "${logs[@]}" | head -1 | cut -d' ' -f3)
    {
        echo "# Differential corpus: upstream kube-proxy and the agent side by side"
        echo
        echo "Latest full run of \`./tests/peers/corpus.sh\`: the agent at commit $commit, $(date -u +%Y-%m-%d),"
        echo "${took} s with ${jobs} lab VMs, kernel ${kernel:-unknown}; kube-proxy and kube-apiserver"
        echo "${kubernetes:-unknown}, etcd ${etcd:-unknown}, from tests/peers/go.mod. Written by corpus.sh from a"
        echo "run that passed, never edited by hand."
        echo "Each scenario of \`tests/peers/scenarios/\` runs upstream \`kube-proxy --proxy-mode=ipvs\` and"
        echo "\`kube-proxy-ipvs\` as the same node in two network namespaces against one real API server; the"
        echo "kernel state is read with the real tools (a tool that fails fails the scenario) at start and"
        echo "after every step, once both programs have seen the step's change and synced after it. Each"
        echo "side must first hold what the API objects imply (a virtual server and a KUBE-CLUSTER-IP member"
        echo "per ClusterIP and port, a real server per ready endpoint: tests/peers/src/implied.rs), then"
        echo "the two are compared. \"differences\" counts the lines that differ over all those points, with"
        echo "the README markers (\"Where it differs\") that explain them, each pairing or bounding what it"
        echo "explains; \"listed only\" means every difference is one the README lists and explains."
        echo
        echo "$table"
    } > tests/peers/RESULTS.md
    echo "corpus: wrote tests/peers/RESULTS.md" >&2
fi
rm -f "${logs[@]}"
echo "corpus: ${took}s, exit $rc" >&2
exit "$rc"

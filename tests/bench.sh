#!/usr/bin/env bash
# The benchmark command (issue 8), separate from the test command: installs what is missing,
# builds the agent's `scale` example in release, boots the lab VM as a PC (fine TSC clock) with
# enough memory and prints the table of the agent against the stock tools on S(N, 5).
#
#   tests/bench.sh            N = 1000 and 10000 (about 10 minutes under emulation)
#   tests/bench.sh --quick    N = 300, 20 changes: a smoke run for CI (about 1 minute)
#   tests/bench.sh --full     N = 1000, 10000 and 50000, and each with --vip-binding=route
#                             (50000 takes tens of minutes)
#   tests/bench.sh --sizes 2000,5000 --reps 3 --changes 200
#
# Beside upstream kube-proxy (issue 16, item 5; tests/peers/tests/beside/mod.rs): the agent,
# kube-proxy --proxy-mode=ipvs and kube-proxy --proxy-mode=nftables, each alone in a fresh
# network namespace, against the real kube-apiserver of the peers harness, on S(N, 5):
#
#   tests/bench.sh --beside   N = 1000, 5000, 10000, 100 changes each (hours under emulation)
#   tests/bench.sh --beside --sizes 1000 --changes 100 [--programs agent,ipvs,nftables]
#                  [--change-secs 900] [--cold-secs 1800]
#
# `nftables` is kube-proxy 1.37.2's nftables mode with its defaults (NFTablesNetlink on), the
# one the nftables_* ratios compare with; `--programs ...,nftables-exec` adds it with
# --feature-gates=NFTablesNetlink=false. PEERS_BESIDE_KUBE_PROXY_ARGS=-v=4 and
# PEERS_BESIDE_DUMP=1 in the environment print kube-proxy's log and table (debugging).
#
# The whole of bench/results.json from one run (emptied first, but for the cluster's
# network_programming, which tests/cluster/latency.sh writes; then the scale bench with the
# given arguments, then the side-by-side bench at its default sizes):
#
#   tests/bench.sh --whole [--full | --sizes ... --route]
#
# The figures also go to bench/results.json (the issue's keys; null for what the run did not
# measure), with the commit and the date the run started (`commit`, `date`; per part in `runs`:
# the scale bench and the side-by-side bench, each with its arguments); then bench/plot.py
# draws the plots of BENCHMARKS.md (bench/*.svg) and its table of the targets from that file.
# Every measurement runs in a fresh network namespace; compare the ratios, not the seconds
# (software emulation is about 20 times slower than a real machine).
set -euo pipefail
cd "$(dirname "$0")/.."
# What is measured: HEAD when the run starts (-dirty if tracked files other than the results
# and the page they are drawn into differ from it); --whole's two parts share it.
if [[ -z ${BENCH_COMMIT:-} ]]; then
    BENCH_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [[ $BENCH_COMMIT != unknown ]] &&
        ! git diff --quiet HEAD -- . ':(exclude)bench' ':(exclude)BENCHMARKS.md' 2>/dev/null; then
        BENCH_COMMIT+=-dirty
    fi
    BENCH_DATE=$(date -u +%Y-%m-%dT%H:%MZ)
    export BENCH_COMMIT BENCH_DATE
fi

# merge PART LINE ARGS: one bench's figures (the JSON after RESULTS-JSON or BESIDE-JSON) into
# bench/results.json, keys another bench wrote kept; then the plots and the page's table.
merge() {
    python3 - "$@" <<'PY'
import json, os, pathlib, sys
part, line, args = sys.argv[1:4]
path = pathlib.Path("bench/results.json")
out = json.loads(path.read_text()) if path.exists() else {}
new = json.loads(line)
sizes = out.get(part, {})
sizes.update(new.pop("sizes" if part == "scale" else "beside"))
out.update(new)
out[part] = sizes
run = {"commit": os.environ["BENCH_COMMIT"], "date": os.environ["BENCH_DATE"], "args": args.strip()}
out.setdefault("runs", {})[part] = run
out["commit"], out["date"] = run["commit"], run["date"]
for k in ("cold_sync_ratio_10k first_service_share_10k first_service_raw_ratio_10k "
          "change_p99_ratio_50k_1k noop_resync_ratio rss_mib_10k rss_mib_50k "
          "cold_sync_ratio_50k_route kube_proxy_cold_ratio_10k kube_proxy_change_cpu_ratio_10k "
          "kube_proxy_rss_ratio_10k nftables_cold_ratio_10k nftables_change_latency_p99_ratio_10k "
          "nftables_change_cpu_ratio_10k nftables_rss_ratio_10k beside_agent_peak_rss_mib_10k").split():
    out.setdefault(k, None)  # every key of issues 16 and 30, null until a run measures it
path.parent.mkdir(exist_ok=True)
path.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
print(f"bench: wrote {path} ({part} at {run['commit']})")
PY
    python3 bench/plot.py
}
if [[ ${1:-} == --whole ]]; then
    shift
    # The cluster's latency table (tests/cluster/latency.sh) is no part of this bench: kept.
    kept=$(python3 -c 'import json; print(json.dumps({"network_programming": json.load(open("bench/results.json")).get("network_programming")}))' 2>/dev/null || echo '{}')
    rm -f bench/results.json
    [[ $kept == '{"network_programming": null}' || $kept == '{}' ]] || echo "$kept" >bench/results.json
    bash tests/bench.sh "$@"
    exec bash tests/bench.sh --beside
fi
bash tests/setup.sh
target=${CARGO_TARGET_DIR:-target}
if [[ ${1:-} == --beside ]]; then
    shift
    sizes=1000,5000,10000 changes=100 programs=agent,ipvs,nftables change_secs=900 cold_secs=1800
    while (($#)); do
        case $1 in
            --sizes) sizes=$2; shift 2 ;;
            --changes) changes=$2; shift 2 ;;
            --programs) programs=$2; shift 2 ;;
            --change-secs) change_secs=$2; shift 2 ;;
            --cold-secs) cold_secs=$2; shift 2 ;;
            *) echo "bench: unknown argument $1" >&2; exit 2 ;;
        esac
    done
    # The agent as operators run it: a release build, copied into the VM beside the tests.
    cargo build --release --quiet -p kube-proxy-ipvs-agent --bin kube-proxy-ipvs
    agent=$(realpath "$target/release/kube-proxy-ipvs")
    log=$(mktemp)
    PEERS_BESIDE_SIZES=$sizes PEERS_BESIDE_CHANGES=$changes PEERS_BESIDE_PROGRAMS=$programs \
    PEERS_BESIDE_CHANGE_SECS=$change_secs PEERS_BESIDE_COLD_SECS=$cold_secs PEERS_BESIDE_AGENT=$agent \
        cargo run --release --quiet -p lab -- test --release --memory 6144 --timeout 43200 \
        -p peers --exe "$agent" -- beside --ignored --nocapture --test-threads 1 | tee "$log"
    line=$(grep -a '^BESIDE-JSON ' "$log" | tail -1 | cut -d' ' -f2-)
    rm -f "$log"
    [[ -n $line ]] || { echo "bench: no BESIDE-JSON line" >&2; exit 1; }
    merge beside "$line" "--beside --sizes $sizes --changes $changes --programs $programs --change-secs $change_secs --cold-secs $cold_secs"
    exit 0
fi
memory=4096
for a in "$@"; do [[ $a == --full ]] && memory=6144; done
cargo build --release --quiet -p kube-proxy-ipvs-agent --example scale
exe=$(realpath "$target/release/examples/scale")
log=$(mktemp)
cargo run --release --quiet -p lab -- run --machine pc --memory "$memory" --timeout 14400 \
    -- "$exe" "$@" | tee "$log"
# The run's figures, merged into bench/results.json (keys another bench wrote stay).
line=$(grep -a '^RESULTS-JSON ' "$log" | tail -1 | cut -d' ' -f2-)
rm -f "$log"
[[ -n $line ]] || { echo "bench: no RESULTS-JSON line" >&2; exit 1; }
merge scale "$line" "$*"

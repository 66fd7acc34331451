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
# The figures also go to bench/results.json (the issue's keys; null for what the run did not
# measure). Every measurement runs in a fresh network namespace; compare the ratios, not the seconds
# (software emulation is about 20 times slower than a real machine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
memory=4096
for a in "$@"; do [[ $a == --full ]] && memory=6144; done
cargo build --release --quiet -p kube-proxy-ipvs-agent --example scale
target=${CARGO_TARGET_DIR:-target}
exe=$(realpath "$target/release/examples/scale")
log=$(mktemp)
cargo run --release --quiet -p lab -- run --machine pc --memory "$memory" --timeout 14400 \
    -- "$exe" "$@" | tee "$log"
# The run's figures, merged into bench/results.json (keys another bench wrote stay).
line=$(grep -a '^RESULTS-JSON ' "$log" | tail -1 | cut -d' ' -f2-)
rm -f "$log"
[[ -n $line ]] || { echo "bench: no RESULTS-JSON line" >&2; exit 1; }
python3 - "$line" <<'PY'
import json, pathlib, sys
path = pathlib.Path("bench/results.json")
out = json.loads(path.read_text()) if path.exists() else {}
new = json.loads(sys.argv[1])
sizes = out.get("scale", {})
sizes.update({k: v for k, v in new.pop("sizes").items()})
out.update(new)
out["scale"] = sizes
path.parent.mkdir(exist_ok=True)
path.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
print(f"bench: wrote {path}")
PY

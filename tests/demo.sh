#!/usr/bin/env bash
# The main job: installs what is missing, builds the agent, boots the lab VM and runs the agent
# there on example manifests (tests/demo/manifests): ipvsadm -ln, then real requests answered
# by pods through ClusterIPs, a NodePort, session affinity, sh and hairpin, then --cleanup.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
cargo build --quiet -p kube-proxy-ipvs-agent
agent="$PWD/target/debug/kube-proxy-ipvs"
files=()
for f in tests/demo/manifests/*.yaml tests/demo/agent.sh; do files+=(--file "$f"); done
cargo run --quiet -p lab -- run --exe "$agent" "${files[@]}" -- /bin/sh "$PWD/tests/demo/agent.sh" "$agent" "$PWD/tests/demo/manifests"

#!/usr/bin/env bash
# The main job: installs what is missing, boots the lab VM and shows a Service's data path
# working there (ipvsadm -ln and real requests answered by pods).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
cargo run --quiet -p lab -- run --file tests/demo/datapath.sh -- /bin/sh "$PWD/tests/demo/datapath.sh"

#!/usr/bin/env bash
# The test command: installs what is missing, checks format, lints, builds the docs, runs the
# host tests, then the kernel tests inside the lab VM. Prints the lab's boot time and the total.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n==> %s (%ss)\n' "$*" "$(($(date +%s) - start))"; }

step "setup"
bash tests/setup.sh
step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
step "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
step "host tests"
cargo test --workspace
step "deployment checks (manifests, Vagrantfile, scripts)"
cargo build --quiet -p kube-proxy-ipvs-agent
bash tests/check-deploy.sh --binary target/debug/kube-proxy-ipvs
step "kernel tests in the lab"
cargo run --quiet -p lab -- test --release
step "done"
echo "total: $(($(date +%s) - start))s"

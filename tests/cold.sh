#!/usr/bin/env bash
# One of the README's two commands as a new machine runs it: a fresh clone of HEAD, with empty
# Go module and build caches and an empty cargo home (registry, git checkouts, installed tools
# such as cargo-deny and cargo-semver-checks), so that every download and compile is counted.
# Only the toolchains (rustup's, Go's) and Debian's packages are kept: a CI machine has them.
#
#   tests/cold.sh [--demo] [--record] [DIR]   (default DIR target/cold; about 40 GB free there)
#
# Without --demo it times the test command (tests/run.sh), with it the demo (tests/demo.sh).
# --record writes the time, the disk it took and the machine to tests/cold/COMMAND.json and
# regenerates the README's block of what a first run needs (between its "cold.sh" markers).
# The clone and the caches stay in DIR for a look afterwards; the next run removes them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command=run record=0 dir=
while [[ $# -gt 0 ]]; do
    case $1 in
        --demo) command=demo; shift ;;
        --record) record=1; shift ;;
        -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
        -*) echo "cold: unknown argument $1 (see --help)" >&2; exit 2 ;;
        *) dir=$1; shift ;;
    esac
done
dir=${dir:-$root/target/cold}
rm -rf "$dir"
mkdir -p "$dir/bin"
commit=$(git -C "$root" rev-parse HEAD)
git clone --quiet --no-hardlinks "$root" "$dir/repo"
git -C "$dir/repo" checkout --quiet "$commit"
# rustup's proxies only: anything else in ~/.cargo/bin was installed by an earlier run.
for tool in cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver rustup; do
    ln -s "$(command -v "$tool")" "$dir/bin/$tool"
done
go=$(dirname "$(command -v go)")
# tests/setup.sh finds the RustSec snapshot beside the repository it runs from.
[[ ! -d $root/../shared ]] || ln -s "$(cd "$root/../shared" && pwd)" "$dir/shared"
echo "cold: tests/$command.sh at $(git -C "$dir/repo" log --oneline -1) in $dir, caches empty" >&2
start=$(date +%s)
rc=0
(cd "$dir/repo" && env -i HOME="$HOME" TERM="${TERM:-dumb}" USER="${USER:-root}" \
    RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" RUSTUP_AUTO_INSTALL=0 \
    CARGO_HOME="$dir/cargo" GOPATH="$dir/go" GOMODCACHE="$dir/go/pkg/mod" GOCACHE="$dir/go-build" \
    PATH="$dir/cargo/bin:$dir/bin:$go:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "./tests/$command.sh") || rc=$?
finished=$(date +%s)
echo "cold: tests/$command.sh took $((finished - start)) s from empty caches (exit $rc)" >&2
bytes() { du -sb "$@" 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }
if [[ $record == 1 ]]; then
    [[ $rc == 0 ]] || { echo "cold: a failed run is not recorded" >&2; exit "$rc"; }
    mkdir -p "$root/tests/cold"
    python3 - "$root/tests/cold/$command.json" <<EOF
import json, os, sys
json.dump({
    "command": "tests/$command.sh",
    "commit": "$commit",
    "started": $start,
    "seconds": $((finished - start)),
    "disk_bytes": {
        "target": $(bytes "$dir/repo/target"),
        "cargo_home": $(bytes "$dir/cargo"),
        "go_caches": $(bytes "$dir/go" "$dir/go-build"),
    },
    "cores": os.cpu_count(),
    "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    "rustc": "$(rustc --version | awk '{print $2}')",
    "go": "$(go env GOVERSION)",
}, open(sys.argv[1], "w"), indent=1)
open(sys.argv[1], "a").write("\n")
EOF
    python3 "$root/tests/cold_page.py" "$root"
fi
exit "$rc"

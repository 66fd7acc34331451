#!/usr/bin/env bash
# The three-phase A/B of one endpoint change (issue 41), between two commits: the `scale`
# example of each, run alone in the lab VM one after the other, `scale estimation N CHANGES`
# (three phases of CHANGES endpoint changes in a row with no full pass between them, the
# kernel's rate estimation on, off, on again). Prints a Markdown table: per N, commit and
# round, the median / p99 of a change in ms per phase, the kernel's apply alone in brackets.
#
#   tests/bench-ab.sh OLD [NEW] [--sizes 1000,50000] [--changes 200] [--rounds 2]
#
# NEW defaults to HEAD; each is built as committed (uncommitted changes are not measured), in one
# worktree under target/ab/, checked out in turn, with its own target directory: two source
# trees sharing one target directory let cargo link one commit's example against the other's
# library (an earlier A/B measured the old commit twice that way).
set -euo pipefail
cd "$(dirname "$0")/.."

old='' new=HEAD sizes=1000,50000 changes=200 rounds=2
while (($#)); do
    case $1 in
    --sizes) sizes=$2 && shift 2 ;;
    --changes) changes=$2 && shift 2 ;;
    --rounds) rounds=$2 && shift 2 ;;
    -*) echo "bench-ab: unknown option $1" >&2 && exit 2 ;;
    *) if [[ -z $old ]]; then old=$1; else new=$1; fi && shift ;;
    esac
done
[[ -n $old ]] || { echo "usage: tests/bench-ab.sh OLD [NEW] [--sizes N,N] [--changes C] [--rounds R]" >&2 && exit 2; }

ab=$PWD/target/ab
mkdir -p "$ab"
cargo build --quiet --release -p lab

# build REV: the scale example of REV at target/ab/bin/SHA/scale (kept: a rerun reuses it).
build() {
    local sha
    sha=$(git rev-parse --short "$1^{commit}")
    if [[ ! -x $ab/bin/$sha/scale ]]; then
        if [[ ! -d $ab/src ]]; then
            git worktree add --quiet --detach "$ab/src" "$sha"
        else
            git -C "$ab/src" checkout --quiet --detach "$sha"
        fi
        echo "bench-ab: building $sha" >&2
        (cd "$ab/src" && CARGO_TARGET_DIR=$ab/target cargo build --quiet --release \
            --example scale -p kube-proxy-ipvs-agent)
        mkdir -p "$ab/bin/$sha"
        cp "$ab/target/release/examples/scale" "$ab/bin/$sha/scale"
    fi
    echo "$sha"
}
old=$(build "$old")
new=$(build "$new")

# One table row from a run's output: "N=50000: ... estimation on A / B (C / D), off ..., on again ...".
row='
import re, sys
n, sha, r = sys.argv[1:]
line = next(l for l in sys.stdin if l.startswith(f"N={n}:"))
cells = re.findall(r"(\d+\.\d+) / (\d+\.\d+) \((\d+\.\d+) / (\d+\.\d+)\)", line)
assert len(cells) == 3, line
print(f"| {int(n):,} | {sha} | {r} | " + " | ".join(f"{a} / {b} ({c} / {d})" for a, b, c, d in cells) + " |")
'
echo "| N | commit | round | phase 1 (on) | phase 2 (off) | phase 3 (on) |"
echo "|---|---|---|---|---|---|"
kernel=
for n in ${sizes//,/ }; do
    for ((r = 1; r <= rounds; r++)); do
        for sha in "$old" "$new"; do
            bin=$ab/bin/$sha/scale
            out=$(cargo run --quiet --release -p lab -- run --machine pc --memory 6144 \
                --exe "$bin" -- "$bin" estimation "$n" "$changes" 2>&1) || {
                echo "$out" >&2 && echo "bench-ab: $sha at N=$n failed" >&2 && exit 1
            }
            kernel=$(sed -n 's/^bench: kernel \([^,]*\),.*/\1/p' <<<"$out" | head -1)
            python3 -c "$row" "$n" "$sha" "$r" <<<"$out"
        done
    done
done
echo
echo "Written by \`tests/bench-ab.sh $old $new --sizes $sizes --changes $changes --rounds $rounds\` on $(date -u +%Y-%m-%d), guest kernel $kernel."

#!/usr/bin/env bash
# The dependency checks (cargo-deny, configured by deny.toml at the repository root):
# - bans, licenses and sources: they need only the lockfile and crates.io's crates already
#   downloaded, and fail on a banned crate (serde_yaml, unsafe-libyaml), a licence not allowed,
#   or a crate from anywhere but crates.io;
# - advisories, against the RustSec advisory database, a git repository on GitHub. A fetch is
#   tried; where GitHub cannot be reached the copy already there is used: the snapshot that
#   tests/setup.sh installs (../shared/rustsec/advisory-db.tar.gz) or one fetched before. The
#   database's own last commit and its date are printed (what the check knows, however old
#   the files look), and "fetched" only when the fetch moved that commit: cargo-deny's fetch
#   exits 0 and logs a fetch even when it reached nothing.
# Exit status: non-zero when a check fails (any advisory), and when there is no database at all
# (no copy, no fetch): an advisory check that cannot run is a failure to fix (give the machine
# the snapshot, or GitHub), not a pass to skip.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-deny >/dev/null; then
    echo "deny: cargo-deny is missing (tests/setup.sh installs it)" >&2
    exit 1
fi

echo "deny: bans, licenses, sources"
cargo deny --log-level error check bans licenses sources

# Where cargo-deny 0.20 keeps the default database (the folder name comes from its URL;
# deny.toml sets no db-urls or db-path).
db="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs/advisory-db-3157b0e258782691"
# The database's last commit, "" when there is none (--git-dir: never a repository further up).
head_of() { git --git-dir="$db/.git" rev-parse --verify -q HEAD 2>/dev/null || true; }
before=$(head_of)
fetch_log=$(mktemp)
trap 'rm -f "$fetch_log"' EXIT
fetch_status=0
timeout 60 cargo deny --log-level info fetch db >"$fetch_log" 2>&1 || fetch_status=$?
# Why a fetch failed, in one line: git's own complaint, else cargo-deny's error, else its last word.
why() {
    grep -m1 'fatal:' "$fetch_log" || grep -m1 '\[ERROR\]' "$fetch_log" | sed 's/^.*\[ERROR\] //' ||
        grep -v '^$' "$fetch_log" | tail -1
}
after=$(head_of)
if [ -z "$after" ]; then
    echo "deny: FAIL: no RustSec advisory database: none in $db (tests/setup.sh installs the" \
        "snapshot ../shared/rustsec/advisory-db.tar.gz when it is there) and the fetch brought" \
        "none (exit $fetch_status: $(why))" >&2
    exit 1
fi
described=$(git --git-dir="$db/.git" log -1 --format='commit %H of %cI')
age_days=$(( ($(date +%s) - $(git --git-dir="$db/.git" log -1 --format=%ct)) / 86400 ))
if [ "$before" != "$after" ]; then
    echo "deny: advisories: RustSec database fetched just now (${before:-no copy before} -> $after): $described"
elif [ "$fetch_status" = 0 ]; then
    echo "deny: advisories: RustSec database $described (${age_days} days old): the fetch brought" \
        "no newer commit (GitHub unreachable, or nothing published since)"
else
    echo "deny: advisories: RustSec database $described (${age_days} days old): the fetch failed" \
        "(exit $fetch_status: $(why))"
fi
cargo deny --log-level error --offline check advisories
echo "deny: advisories ok against $described"

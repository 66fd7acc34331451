#!/usr/bin/env bash
# The dependency checks (cargo-deny, configured by deny.toml at the repository root):
# - bans, licenses and sources always run: they need only the lockfile and crates.io's
#   crates already downloaded, and fail on a banned crate (serde_yaml, unsafe-libyaml), a
#   licence not allowed, or a crate from anywhere but crates.io;
# - advisories run against the RustSec advisory database, which is a git repository on
#   GitHub. When it cannot be fetched (a machine that reaches only package registries), a
#   copy fetched before is used and its age said; with no copy at all the check is SKIPPED,
#   and this script says so and why, loudly, rather than pass it silently.
# Exit status: non-zero when a check that ran failed (an advisory included).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-deny >/dev/null; then
    echo "deny: cargo-deny is missing (tests/setup.sh installs it)" >&2
    exit 1
fi

echo "deny: bans, licenses, sources"
cargo deny --log-level error check bans licenses sources

db_root="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
fetch_log=$(mktemp)
trap 'rm -f "$fetch_log"' EXIT
if timeout 60 cargo deny --log-level error fetch db >"$fetch_log" 2>&1; then
    echo "deny: advisories (RustSec database fetched just now)"
    cargo deny --log-level error --offline check advisories
elif compgen -G "$db_root/*/.git" >/dev/null; then
    newest=$(find "$db_root" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' | sort -nr | head -1 | cut -d' ' -f2-)
    age_days=$(( ($(date +%s) - $(stat -c %Y "$newest")) / 86400 ))
    echo "deny: advisories against a copy of the RustSec database fetched ${age_days} day(s) ago:" \
        "it cannot be fetched now ($(grep -v "^$" "$fetch_log" | tail -1))"
    cargo deny --log-level error --offline check advisories
else
    echo "deny: advisories SKIPPED: the RustSec advisory database (a git repository on GitHub)" \
        "cannot be fetched from this machine and no copy was fetched before:" \
        "$(grep -v "^$" "$fetch_log" | tail -1)"
    echo "deny: advisories SKIPPED: run 'cargo deny check advisories' where GitHub is reachable"
fi

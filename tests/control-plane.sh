# The lab's real control plane for the checks that need an API server and no node
# (tests/check-rbac.sh, tests/check-swap.sh): `lab control-plane`, etcd and kube-apiserver from
# tests/peers/build.sh on this host. Sourced from the repository's root, after the caller has
# defined `fail`:
#   control_plane_start WORKDIR   starts it (its log in WORKDIR/cp.log), waits up to 120 s for
#                                 it, and sets CONTROL_PLANE_DIR (its kubeconfigs are there)
#   control_plane_stop            stops it (Enter on its stdin); call it from the EXIT trap
# shellcheck shell=bash
cp_pid=
control_plane_start() {
    local work=$1
    cargo build --quiet -p lab
    mkfifo "$work/cp.in"
    target/debug/lab control-plane <"$work/cp.in" >"$work/cp.log" 2>&1 &
    cp_pid=$!
    exec 3>"$work/cp.in"
    for _ in $(seq 1 120); do
        grep -q 'press Enter to stop' "$work/cp.log" && break
        kill -0 "$cp_pid" 2>/dev/null || { cat "$work/cp.log" >&2; fail "the control plane did not start"; }
        sleep 1
    done
    grep -q 'press Enter to stop' "$work/cp.log" ||
        { cat "$work/cp.log" >&2; fail "the control plane did not start in 120 s"; }
    # lab control-plane keeps its files under target/lab/control-plane of the current directory.
    # shellcheck disable=SC2034 # the caller's
    CONTROL_PLANE_DIR=$PWD/target/lab/control-plane
}
control_plane_stop() {
    [ -n "$cp_pid" ] || return 0
    echo >&3 || true
    exec 3>&-
    wait "$cp_pid" 2>/dev/null || true
    cp_pid=
}

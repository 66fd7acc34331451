#!/bin/bash
# The init container's script (deploy/init-sysctls.sh) against hostile ConfigMap lines, on a
# fake /proc/sys (PROC_SYS) with a fake modprobe (MODPROBE), run by dash as in the image:
#   1. a list of hostile lines (paths outside the allowlist, "..", links, shell syntax,
#      non-numeric values, lines cut by newlines) beside allowed ones: every allowed line is
#      written, every hostile one refused, and no other file inside or outside the fake root
#      changes or appears; the exit status is non-zero;
#   2. the IPVS modules are loaded before any sysctl is written: ip_vs, every scheduler, then
#      nf_conntrack; a scheduler that fails to load is a warning, not a failure;
#   3. ip_vs that cannot be loaded is fatal with a clear message, and nothing is written;
#      ip_vs already loaded (its sysctls present) while modprobe fails is not.
# Exits non-zero on the first failed check, saying which.
#
#   tests/init-sysctls-test.sh
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
script=$repo/deploy/init-sysctls.sh
shell=$(command -v dash || command -v sh)
sb=$(mktemp -d)
trap 'rm -rf "$sb"' EXIT

fail() {
    echo "init-sysctls-test: FAIL: $*" >&2
    [ -f "$sb/out" ] && sed 's/^/  | /' "$sb/out" >&2
    exit 1
}

# A fake modprobe: records each module asked for, fails for those in FAIL_MODULES.
cat >"$sb/modprobe" <<'FAKE'
#!/bin/sh
echo "$1" >>"$MODPROBE_LOG"
case " $FAIL_MODULES " in *" $1 "*) exit 1 ;; esac
exit 0
FAKE
chmod +x "$sb/modprobe"
export MODPROBE=$sb/modprobe MODPROBE_LOG=$sb/modprobe.log FAIL_MODULES=""

# The sandbox: the fake /proc/sys ($sb/root) and, beside it, files a climb out of it reaches.
root=$sb/root
fresh() {
    rm -rf "$root" "$sb/outside" "$sb/modprobe.log" "$sb/sys"
    mkdir -p "$root/kernel" "$root/net/ipv4/vs" "$root/net/ipv4/conf/all" "$root/net/ipv4/conf/eth0" \
        "$root/net/ipv6/conf/all" "$root/net/netfilter" "$sb/outside/kernel" "$sb/sys/module/nf_conntrack/parameters"
    echo 16384 >"$sb/sys/module/nf_conntrack/parameters/hashsize"
    echo 1 >"$root/net/ipv4/vs/conn_reuse_mode"
    for f in kernel/core_pattern net/ipv4/ip_forward net/ipv4/vs/conntrack net/ipv4/vs/expire_nodest_conn \
        net/ipv4/conf/all/arp_ignore net/ipv4/conf/eth0/arp_announce net/ipv4/conf/all/rp_filter \
        net/ipv6/conf/all/forwarding net/netfilter/nf_conntrack_max; do
        echo 0 >"$root/$f"
    done
    echo core >"$root/kernel/core_pattern"
    echo core >"$sb/outside/kernel/core_pattern"
    # /proc/sys has no links; a ConfigMap line naming one must not write through it.
    ln -s ../../../kernel/core_pattern "$root/net/ipv4/vs/link"
    touch "$sb/modprobe.log"
}
snapshot() { # every file and link under the sandbox but the fake modprobe's log, with its content
    (cd "$sb" && find . -path ./modprobe.log -prune -o -path ./out -prune -o -path ./snap-\* -prune \
        -o \( -type f -o -type l \) -print | sort | while read -r f; do
        if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; else echo "$f: $(cat "$f")"; fi
    done)
}
run() { # list-file -> the script's status; its output in $sb/out. A fake /sys/module and
    # kernel release too: the host's own must never be written.
    (cd "$sb" && PROC_SYS=$root SYS_MODULE=$sb/sys/module KERNEL_RELEASE=${KERNEL_RELEASE:-6.1.0-28-cloud-amd64} \
        "$shell" "$script" "$1") >"$sb/out" 2>&1
}

# ---- 1. hostile lines beside allowed ones
fresh
cat >"$sb/hostile" <<'LIST'
# allowed
net/ipv4/ip_forward=1
net/ipv4/vs/conntrack=1
net/ipv4/conf/eth0/arp_announce=2
net/ipv6/conf/all/forwarding = 1
net/netfilter/nf_conntrack_max=percpu:1:131072
# hostile
kernel/core_pattern=|/bin/sh -c 'touch /tmp/pwned'
kernel/core_pattern=1
?kernel/core_pattern=1
/kernel/core_pattern=1
../outside/kernel/core_pattern=1
net/ipv4/vs/../../../kernel/core_pattern=1
net/ipv4/vs/../../../../outside/kernel/core_pattern=1
net/ipv4/vs/..=1
net/netfilter/nf_conntrack_../../kernel/core_pattern=1
net/ipv4/conf/../../../kernel/core_pattern=1
net/ipv4/conf/all/arp_ignore/../../../../../kernel/core_pattern=1
net/ipv4/conf/..=1
net/ipv4/conf/all/rp_filter=1
net/ipv4/vs/*=1
net/ipv4/vs/link=1
net/ipv4/vs/conntrack=|/bin/sh
net/ipv4/vs/conntrack=$(touch pwned)
net/ipv4/vs/conntrack=`touch pwned`
net/ipv4/vs/conntrack=1;touch pwned
net/ipv4/vs/conntrack=1 kernel/core_pattern=1
net/ipv4/vs/conntrack=-1
net/ipv4/vs/conntrack=0x10
net/ipv4/vs/conntrack=
net/ipv4/vs/conntrack=1=2
net/netfilter/nf_conntrack_max=percpu:1:|sh
net/netfilter/nf_conntrack_max=percpu:x:1
net/netfilter/nf_conntrack_max=99999999999999999999999
net/ipv4/vs/expire_nodest_conn=
|/bin/sh
net/ipv4/vs/conntrack
LIST
hostile=$(sed -n '/^# hostile$/,$p' "$sb/hostile" | grep -vc '^#' || true)
# A CR and a tab inside a line, as a Windows-edited ConfigMap has.
printf 'net/ipv4/vs/expire_nodest_conn\t=\t1\r\n' >>"$sb/hostile"
before=$(snapshot)
if run "$sb/hostile"; then
    fail "hostile list: exit status 0"
fi
after=$(snapshot)
want=$(printf '%s\n' "$before" | sed \
    -e 's|^\./root/net/ipv4/ip_forward: 0$|./root/net/ipv4/ip_forward: 1|' \
    -e 's|^\./root/net/ipv4/vs/conntrack: 0$|./root/net/ipv4/vs/conntrack: 1|' \
    -e 's|^\./root/net/ipv4/vs/expire_nodest_conn: 0$|./root/net/ipv4/vs/expire_nodest_conn: 1|' \
    -e 's|^\./root/net/ipv4/conf/eth0/arp_announce: 0$|./root/net/ipv4/conf/eth0/arp_announce: 2|' \
    -e 's|^\./root/net/ipv6/conf/all/forwarding: 0$|./root/net/ipv6/conf/all/forwarding: 1|' \
    -e "s|^\./root/net/netfilter/nf_conntrack_max: 0$|./root/net/netfilter/nf_conntrack_max: $(($(nproc) > 131072 ? $(nproc) : 131072))|" \
    -e "s|^\./sys/module/nf_conntrack/parameters/hashsize: 16384$|./sys/module/nf_conntrack/parameters/hashsize: $(($(nproc) > 131072 ? $(nproc) / 4 : 32768))|")
if [ "$after" != "$want" ]; then
    fail "hostile list: the sandbox is not what the allowed lines alone make:
$(diff <(printf '%s\n' "$want") <(printf '%s\n' "$after") || true)"
fi
[ ! -e /tmp/pwned ] || fail "hostile list: /tmp/pwned exists"
refused=$(grep -c '^error: refused' "$sb/out" || true)
if [ "$refused" -ne "$hostile" ]; then
    fail "hostile list: $refused of $hostile hostile lines refused"
fi
grep -q 'set     net/ipv4/vs/expire_nodest_conn=1' "$sb/out" ||
    fail "hostile list: the line with a tab and a CR was not written"

# ---- 2. modules first, a missing scheduler only warned about
fresh
printf 'net/ipv4/vs/conntrack=1\n' >"$sb/good"
if ! FAIL_MODULES="ip_vs_twos ip_vs_mh" run "$sb/good"; then
    fail "a scheduler that fails to load is fatal"
fi
want_modules="ip_vs ip_vs_rr ip_vs_wrr ip_vs_lc ip_vs_wlc ip_vs_lblc ip_vs_lblcr ip_vs_dh ip_vs_sh ip_vs_sed ip_vs_nq ip_vs_mh ip_vs_fo ip_vs_ovf ip_vs_twos nf_conntrack"
[ "$(tr '\n' ' ' <"$sb/modprobe.log")" = "$want_modules " ] ||
    fail "modules loaded: $(tr '\n' ' ' <"$sb/modprobe.log"), want $want_modules"
grep -q 'warning: cannot load ip_vs_twos' "$sb/out" || fail "no warning for ip_vs_twos"
[ "$(grep -n 'module  nf_conntrack' "$sb/out" | cut -d: -f1)" -lt "$(grep -n '^set ' "$sb/out" | head -1 | cut -d: -f1)" ] ||
    fail "a sysctl was written before the modules were loaded"

# ---- 3. ip_vs
fresh
rm -r "$root/net/ipv4/vs"
if FAIL_MODULES=ip_vs run "$sb/good"; then
    fail "ip_vs that cannot be loaded is not fatal"
fi
grep -q 'the ip_vs module is not loaded on this node' "$sb/out" || fail "no clear message without ip_vs"
[ "$(cat "$root/net/ipv4/ip_forward")" = 0 ] || fail "a sysctl was written without ip_vs"
fresh
if ! FAIL_MODULES=ip_vs run "$sb/good"; then
    fail "ip_vs already loaded, modprobe failing: fatal"
fi
[ "$(cat "$root/net/ipv4/vs/conntrack")" = 1 ] || fail "ip_vs already loaded: conntrack not written"

# ---- 4. kube-proxy's kernel rule for conn_reuse_mode, and nf_conntrack_max only raised
printf 'net/netfilter/nf_conntrack_max=131072\n' >"$sb/max"
for case in "3.10.0-1160.el7.x86_64 1" "4.18.0-553.el8_10.x86_64 0" "5.4.0-200-generic 0" \
    "5.8.18 0" "5.9.0 1" "6.1.0-28-cloud-amd64 1" "6.12.9+bpo-amd64 1"; do
    release=${case% *} want=${case##* }
    fresh
    KERNEL_RELEASE=$release run "$sb/max" || fail "kernel $release: exit status non-zero"
    [ "$(cat "$root/net/ipv4/vs/conn_reuse_mode")" = "$want" ] ||
        fail "kernel $release: conn_reuse_mode is $(cat "$root/net/ipv4/vs/conn_reuse_mode"), want $want"
    [ "$(cat "$sb/sys/module/nf_conntrack/parameters/hashsize")" = 32768 ] ||
        fail "kernel $release: hashsize not raised to a quarter of nf_conntrack_max"
done
fresh
echo 262144 >"$root/net/netfilter/nf_conntrack_max"
echo 131072 >"$sb/sys/module/nf_conntrack/parameters/hashsize"
run "$sb/max" || fail "a higher nf_conntrack_max: exit status non-zero"
[ "$(cat "$root/net/netfilter/nf_conntrack_max")" = 262144 ] || fail "nf_conntrack_max was lowered"
[ "$(cat "$sb/sys/module/nf_conntrack/parameters/hashsize")" = 131072 ] || fail "hashsize was lowered"
fresh
if KERNEL_RELEASE=garbage run "$sb/max"; then :; else fail "a release without a version is fatal"; fi
grep -q "kernel release 'garbage' has no version" "$sb/out" || fail "no warning for a release without a version"
[ "$(cat "$root/net/ipv4/vs/conn_reuse_mode")" = 1 ] || fail "a release without a version: conn_reuse_mode written"

echo "init-sysctls-test: ok ($hostile hostile lines refused, modules loaded first, conn_reuse_mode for 3.10, 4.18, 5.4, 5.8, 5.9, 6.1 and 6.12, hashsize a quarter of nf_conntrack_max)"

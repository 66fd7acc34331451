#!/bin/sh
# kube-proxy-ipvs-sysctls: the DaemonSet's init container. Loads the IPVS modules, then writes
# the sysctls listed in a file (default /etc/kube-proxy-ipvs/sysctls, the ConfigMap's
# "sysctls" key) below /proc/sys, so that the agent itself can run without privilege: a
# container runtime mounts /proc/sys read-only in every container that is not privileged, and
# no capability lifts that, so this short-lived container is the one that is privileged.
#
# Modules: ip_vs (fatal when it cannot be loaded and is not loaded already), every IPVS
# scheduler the node's kernel has (a missing one is logged: Services asking for it fail, the
# node does not), and nf_conntrack. Loading the schedulers here, before any Service asks for
# one, keeps IPVS from loading lblc/lblcr itself under its mutex (see deploy/README.md), and
# a node that relied on kube-proxy loading ip_vs keeps working after a reboot.
#
# Format, one per line: key=value, the key relative to /proc/sys ("net/ipv4/ip_forward").
# A leading "?" marks a key that may be absent (its module is not loaded). A value
# "percpu:N:MIN" means N times the number of CPUs, at least MIN. Blank lines and lines
# starting with "#" are skipped.
#
# Whoever may edit the ConfigMap must not get root on the node through this privileged
# container, so only these keys are written, with decimal values, and any other line is
# refused (the script then exits non-zero, after writing the lines that are allowed):
#   net/ipv4/vs/NAME  net/ipv4/ip_forward  net/ipv4/conf/IFACE/arp_NAME
#   net/ipv6/conf/all/forwarding  net/netfilter/nf_conntrack_NAME
#
# Then what kube-proxy itself does on a node, whatever the list says:
# - net/ipv4/vs/conn_reuse_mode=0 on kernels 4.1 to 5.8, where the default delays the first
#   SYN of a reused connection by a second; 5.9 fixed that, and before 4.1 the key is absent;
# - nf_conntrack_max only ever raised, never lowered, and the nf_conntrack module's hashsize
#   raised to a quarter of it when smaller.
#
# Environment, for tests: PROC_SYS (default /proc/sys), MODPROBE (default modprobe),
# SYS_MODULE (default /sys/module), KERNEL_RELEASE (default: uname -r).
set -eu

list=${1:-/etc/kube-proxy-ipvs/sysctls}
root=${PROC_SYS:-/proc/sys}
modprobe=${MODPROBE:-modprobe}
sys_module=${SYS_MODULE:-/sys/module}
release=${KERNEL_RELEASE:-$(uname -r)}
conntrack_max=
cpus=$(nproc)
status=0

# IPVS's schedulers, as in the kernel's net/netfilter/ipvs/Kconfig (ip_vs_twos from 6.7).
schedulers="rr wrr lc wlc lblc lblcr dh sh sed nq mh fo ovf twos"

load() { # module -> 0 when modprobe loaded it (or it is built in)
    "$modprobe" "$1" 2>/dev/null
}

if load ip_vs; then
    echo "module  ip_vs"
elif [ -d "$root/net/ipv4/vs" ]; then
    # Loaded already (by the node or an earlier proxy), though modprobe cannot say so here
    # (no /lib/modules mounted, no modprobe in the image).
    echo "module  ip_vs (already loaded; $modprobe could not load it)"
else
    echo "error: the ip_vs module is not loaded on this node and '$modprobe ip_vs' failed: install the kernel's IPVS module (linux-modules-extra on some distributions) or load it at boot (/etc/modules-load.d, see deploy/README.md)" >&2
    exit 1
fi
for s in $schedulers; do
    if load "ip_vs_$s"; then
        echo "module  ip_vs_$s"
    else
        echo "warning: cannot load ip_vs_$s (not in this kernel?): Services with scheduler $s will fail on this node"
    fi
done
if load nf_conntrack; then
    echo "module  nf_conntrack"
else
    echo "warning: cannot load nf_conntrack; its sysctls below will be missing"
fi

# 0 when $1 is a key this container may write: one of the allowlist's shapes, made of
# path characters only, no ".." (so nothing climbs out of net/).
allowed() {
    case $1 in
        *[!A-Za-z0-9_./-]* | *..* | */ | *//*) return 1 ;;
    esac
    case $1 in
        net/ipv4/ip_forward | net/ipv6/conf/all/forwarding) return 0 ;;
    esac
    rest=
    case $1 in
        net/ipv4/vs/?*) rest=${1#net/ipv4/vs/} ;;
        net/netfilter/nf_conntrack_?*) rest=${1#net/netfilter/} ;;
        net/ipv4/conf/?*/arp_?*)
            iface=${1#net/ipv4/conf/}
            iface=${iface%%/*}
            rest=${1#net/ipv4/conf/"$iface"/}
            case $iface in . | ..) return 1 ;; esac
            case $rest in arp_*) ;; *) return 1 ;; esac
            ;;
        *) return 1 ;;
    esac
    # The last part is one name, not a path.
    case $rest in '' | */* | *.*) return 1 ;; esac
    return 0
}

put() { # FILE VALUE SHOWN [WHY]: VALUE written into FILE unless it holds it; says which as SHOWN
    if [ "$(cat "$1" 2>/dev/null)" = "$2" ]; then
        echo "kept    $3"
    elif printf '%s\n' "$2" 2>/dev/null >"$1"; then
        echo "set     $3${4:+ ($4)}"
    else
        echo "error: cannot write $1 (is this container privileged? /proc/sys and /sys are read-only otherwise)" >&2
        status=1
    fi
}

number() { # 0 when $1 is a decimal number of at most 18 digits (a sysctl integer)
    case $1 in '' | *[!0-9]*) return 1 ;; esac
    [ ${#1} -le 18 ]
}

while IFS= read -r line || [ -n "$line" ]; do
    line=$(printf '%s' "$line" | tr -d ' \t\r')
    case $line in '' | '#'*) continue ;; esac
    optional=false
    case $line in '?'*) optional=true; line=${line#?} ;; esac
    case $line in
        *=*) ;;
        *) printf "error: refused '%s': not key=value\n" "$line" >&2; status=1; continue ;;
    esac
    key=${line%%=*}
    value=${line#*=}
    if ! allowed "$key"; then
        printf "error: refused '%s': not a sysctl this container writes (net/ipv4/vs/*, net/ipv4/ip_forward, net/ipv4/conf/*/arp_*, net/ipv6/conf/all/forwarding, net/netfilter/nf_conntrack_*)\n" "$key" >&2
        status=1
        continue
    fi
    case $value in
        percpu:*:*)
            rest=${value#percpu:}
            per=${rest%%:*}
            min=${rest#*:}
            if ! number "$per" || ! number "$min"; then
                printf "error: refused %s: '%s' is not percpu:NUMBER:NUMBER\n" "$key" "$value" >&2
                status=1
                continue
            fi
            value=$((per * cpus))
            [ "$value" -ge "$min" ] || value=$min
            ;;
    esac
    if ! number "$value"; then
        printf "error: refused %s: '%s' is not a decimal number\n" "$key" "$value" >&2
        status=1
        continue
    fi
    path=$root/$key
    if [ -L "$path" ]; then
        # /proc/sys has no links: one here leads somewhere else.
        echo "error: refused $key: $path is a symbolic link" >&2
        status=1
        continue
    fi
    if [ ! -f "$path" ]; then
        if $optional; then
            echo "skipped $key: absent (module not loaded)"
            continue
        fi
        case $key in
            net/ipv4/vs/*) echo "error: $path is missing: the ip_vs module is not loaded on this node; load it at boot (/etc/modules-load.d, see deploy/README.md)" >&2 ;;
            *) echo "error: $path is missing" >&2 ;;
        esac
        status=1
        continue
    fi
    if [ "$key" = net/netfilter/nf_conntrack_max ]; then
        current=$(cat "$path")
        if number "$current" && [ "$current" -gt "$value" ]; then
            # kube-proxy only raises it: a node sized higher keeps its own.
            echo "kept    $key=$current (above $value)"
            conntrack_max=$current
            continue
        fi
        conntrack_max=$value
    fi
    put "$path" "$value" "$key=$value"
done <"$list"

# kube-proxy's kernel rule for conn_reuse_mode (IPVSConnReuseModeMinSupportedKernelVersion,
# IPVSConnReuseModeFixedKernelVersion).
major=${release%%.*}
minor=${release#*.}
minor=${minor%%[!0-9]*}
path=$root/net/ipv4/vs/conn_reuse_mode
if ! number "$major" || ! number "$minor"; then
    echo "warning: kernel release '$release' has no version: net/ipv4/vs/conn_reuse_mode left as it is"
elif [ "$major" -lt 4 ] || { [ "$major" -eq 4 ] && [ "$minor" -lt 1 ]; }; then
    echo "skipped net/ipv4/vs/conn_reuse_mode: kernel $major.$minor is older than 4.1"
elif [ "$major" -gt 5 ] || { [ "$major" -eq 5 ] && [ "$minor" -ge 9 ]; }; then
    echo "left    net/ipv4/vs/conn_reuse_mode: kernel $major.$minor (5.9 or later)"
else
    put "$path" 0 net/ipv4/vs/conn_reuse_mode=0 "kernel $major.$minor: a reused connection's first SYN waits 1 s otherwise"
fi

# The conntrack table's buckets: a quarter of its maximum, as kube-proxy sets them.
hashsize=$sys_module/nf_conntrack/parameters/hashsize
if [ -n "$conntrack_max" ] && [ -f "$hashsize" ] && [ ! -L "$hashsize" ]; then
    want=$((conntrack_max / 4))
    current=$(cat "$hashsize")
    if ! number "$current"; then
        echo "warning: $hashsize holds '$current', not a number: left as it is"
    elif [ "$current" -ge "$want" ]; then
        echo "kept    nf_conntrack hashsize=$current"
    else
        put "$hashsize" "$want" "nf_conntrack hashsize=$want" "a quarter of nf_conntrack_max $conntrack_max"
    fi
fi

exit "$status"

#!/bin/sh
# kube-proxy-ipvs-sysctls: the DaemonSet's init container. Writes the sysctls listed in a
# file (default /etc/kube-proxy-ipvs/sysctls, the ConfigMap's "sysctls" key) below
# /proc/sys, so that the agent itself can run without privilege: a container runtime mounts
# /proc/sys read-only in every container that is not privileged, and no capability lifts
# that, so this short-lived container is the one that is privileged.
#
# Format, one per line: key=value, the key relative to /proc/sys ("net/ipv4/ip_forward").
# A leading "?" marks a key that may be absent (its module is not loaded). A value
# "percpu:N:MIN" means N times the number of CPUs, at least MIN. Blank lines and lines
# starting with "#" are skipped.
set -eu

list=${1:-/etc/kube-proxy-ipvs/sysctls}
root=${PROC_SYS:-/proc/sys}
cpus=$(nproc)
status=0

while IFS= read -r line || [ -n "$line" ]; do
    line=$(printf '%s' "$line" | tr -d ' \t\r')
    case $line in '' | '#'*) continue ;; esac
    optional=false
    case $line in '?'*) optional=true; line=${line#?} ;; esac
    key=${line%%=*}
    value=${line#*=}
    case $value in
        percpu:*:*)
            rest=${value#percpu:}
            per=${rest%%:*}
            min=${rest#*:}
            value=$((per * cpus))
            [ "$value" -ge "$min" ] || value=$min
            ;;
    esac
    path=$root/$key
    if [ ! -e "$path" ]; then
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
    if [ "$(cat "$path")" = "$value" ]; then
        echo "kept    $key=$value"
    elif printf '%s\n' "$value" 2>/dev/null >"$path"; then
        echo "set     $key=$value"
    else
        echo "error: cannot write $path (is this container privileged? /proc/sys is read-only otherwise)" >&2
        status=1
    fi
done <"$list"

exit "$status"

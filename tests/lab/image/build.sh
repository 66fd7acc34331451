#!/usr/bin/env bash
# Builds the lab's base image from Debian packages and this host's tools.
#
#   build.sh KERNEL_DEB OUT_DIR
#
# OUT_DIR receives: vmlinuz, base.cpio (the initramfs), kernel.release and base.files (every path
# in the image, so that a payload can skip what the image already holds). Run as root (mknod,
# file ownership). The Rust side (`lab image`) decides when to run it and caches the result.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
here=$(cd "$(dirname "$0")" && pwd)
deb=$1
out=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/lab-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- kernel -----------------------------------------------------------------------------
dpkg-deb -x "$deb" "$work/kernel"
kver=$(ls "$work/kernel/lib/modules")
depmod -b "$work/kernel" "$kver"
kmods="$work/kernel/lib/modules/$kver"

root="$work/root"
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,run,tmp,root,var/lib,lab}
# Debian's merged-/usr layout. A payload archive must never carry these top-level names.
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

# Module closure: the listed modules plus everything they depend on (modules.dep).
want="$work/modules.want"
: >"$want"
while read -r pat; do
    case "$pat" in ''|'#'*) continue ;; esac
    (cd "$kmods" || exit 1; compgen -G "kernel/$pat" || true) >>"$want"
done <"$here/modules.list"
sort -u "$want" -o "$want"
closure="$work/modules.closure"
cp "$want" "$closure"
while :; do
    n=$(wc -l <"$closure")
    # modules.dep lines: "kernel/a.ko: kernel/b.ko kernel/c.ko"
    awk -F': *' 'NR==FNR { want[$1]=1; next } ($1 in want) { print $1; n=split($2, d, " "); for (i=1;i<=n;i++) print d[i] }' \
        "$closure" "$kmods/modules.dep" | sort -u >"$closure.new"
    mv "$closure.new" "$closure"
    [ "$(wc -l <"$closure")" -eq "$n" ] && break
done
mdst="$root/usr/lib/modules/$kver"
mkdir -p "$mdst"
while read -r m; do
    mkdir -p "$mdst/$(dirname "$m")"
    cp "$kmods/$m" "$mdst/$m"
done <"$closure"
cp "$kmods"/modules.{order,builtin,builtin.modinfo} "$mdst/"
depmod -b "$root" "$kver"
cp "$work/kernel/boot/vmlinuz-$kver" "$work/vmlinuz"

# --- userland -----------------------------------------------------------------------------
# copy_path P: copies P into the image at its canonical location, recreating each symlink on
# the way (so /usr/sbin/iptables -> /etc/alternatives/iptables -> xtables-nft-multi keeps the
# argv[0] the multi-call binaries dispatch on).
copy_path() {
    local p=$1
    local guard=0
    while [ -L "$p" ] && [ $guard -lt 16 ]; do
        local dir target
        dir=$(cd "$(dirname "$p")" && pwd -P)
        target=$(readlink "$p")
        mkdir -p "$root$dir"
        ln -sfn "$target" "$root$dir/$(basename "$p")"
        case "$target" in /*) p=$target ;; *) p="$dir/$target" ;; esac
        guard=$((guard + 1))
    done
    local real
    real=$(readlink -f "$p")
    mkdir -p "$root$(dirname "$real")"
    [ -e "$root$real" ] || cp -p "$real" "$root$real"
    echo "$real"
}
copy_libs() {
    # ldd prints "libx.so => /path (addr)" and "/lib64/ld-linux-x86-64.so.2 (addr)".
    ldd "$1" 2>/dev/null | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
        copy_path "$lib" >/dev/null
    done
}
elfs="$work/elfs"
: >"$elfs"
while read -r tool; do
    case "$tool" in ''|'#'*) continue ;; esac
    case "$tool" in
        /*) path=$tool ;;
        *) path=$(command -v "$tool") || { echo "build.sh: $tool not installed" >&2; exit 1; } ;;
    esac
    copy_path "$path" >>"$elfs"
done <"$here/tools.list"
for so in /usr/lib/x86_64-linux-gnu/xtables/*.so; do copy_path "$so" >>"$elfs"; done
sort -u "$elfs" | while read -r f; do copy_libs "$f"; done

# busybox for everything else, never shadowing a real tool.
bb=$(readlink -f "$(command -v busybox)")
mkdir -p "$root/usr/bin"
cp "$bb" "$root/usr/bin/busybox"
"$bb" --list-full | while read -r applet; do
    canon=$applet
    case "$canon" in bin/*|sbin/*) canon="usr/$canon" ;; esac
    [ -e "$root/$canon" ] || [ -L "$root/$canon" ] || ln -s /usr/bin/busybox "$root/$canon"
done
ln -sfn dash "$root/usr/bin/sh"

# Configuration files the tools read.
for f in /etc/protocols /etc/services /etc/ethertypes /etc/nsswitch.conf; do
    [ -e "$f" ] && cp "$f" "$root$f"
done
[ -d /etc/iproute2 ] && cp -r /etc/iproute2 "$root/etc/"
# TLS clients (the kube client) load the system's CA bundle even for plain-HTTP servers.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    mkdir -p "$root/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
[ -d /usr/share/iproute2 ] && mkdir -p "$root/usr/share" && cp -r /usr/share/iproute2 "$root/usr/share/"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost lab\n::1 localhost\n' >"$root/etc/hosts"
: >"$root/etc/fstab"
mkdir -p "$root/etc/modprobe.d"

cp "$here/init" "$root/init"
chmod 755 "$root/init"
mknod -m 600 "$root/dev/console" c 5 1
mknod -m 666 "$root/dev/null" c 1 3

# --- archive -------------------------------------------------------------------------------
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) >"$work/base.cpio"
(cd "$root" && find . -mindepth 1 | sed 's|^\./|/|' | LC_ALL=C sort) >"$work/base.files"
echo "$kver" >"$work/kernel.release"
mkdir -p "$out"
mv "$work/vmlinuz" "$work/base.cpio" "$work/base.files" "$work/kernel.release" "$out/"
echo "lab image: kernel $kver, $(wc -l <"$closure") modules, $(du -sh "$root" | cut -f1) unpacked, $(du -h "$out/base.cpio" | cut -f1) archive" >&2

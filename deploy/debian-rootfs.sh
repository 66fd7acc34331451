#!/bin/sh
# Debian bookworm root file systems as image layers, for images built without an image
# builder (deploy/build-image.sh when no podman, buildah or docker is found;
# tests/cluster/images.sh): mmdebstrap's minbase variant with the packages asked for, as
# bookworm-slim is made (no recommends; no documentation but the copyright files, no man
# pages, locales or info, as debuerreotype's slimify leaves out; no apt lists, caches or
# logs, as deploy/Containerfile removes), written by deploy/oci-archive.py as one
# normalized layer. mmdebstrap is apt-get installed when missing (as root).
#
#   deploy/debian-rootfs.sh [--lower "PKG ..."] PKG ...
#       prints "layer FILE" lines, lowest first, then "rootfs DIR" (the whole tree,
#       unpacked, for checks). Without --lower: one layer, minbase + PKGs. With it: the
#       layer of minbase + the --lower packages, and over it what minbase + both lists
#       adds or changes, so that images on the same lower packages share that layer.
#   deploy/debian-rootfs.sh --snapshot
#       prints the archive's state that the cache is keyed by (below).
#   deploy/debian-rootfs.sh --run ROOTFS DIR -- COMMAND...
#       runs COMMAND chrooted in ROOTFS with DIR's files on top (a hard-linked copy of
#       ROOTFS, removed after), e.g. to see that a binary finds its libraries there.
#
# The mirror is the host's (its /etc/apt/sources.list* entries for bookworm and
# bookworm-security), or DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR. The cache, under
# target/image-cache/debian (IMAGE_CACHE=DIR for another), is keyed by the package lists,
# this script and the mirror's snapshot: the Date of each suite's InRelease, resolved at
# every call (DEBIAN_SNAPSHOT=STRING, as --snapshot prints it, pins it, so that a run that
# builds several images builds them on one snapshot). A rebuild on an unchanged snapshot
# takes no time; a newer snapshot builds anew and removes the older trees of the same
# packages. Without a network, the newest tree of the same packages is used.
#
# DEBIAN_ARCH=arm64 builds another architecture's tree (default: this machine's). Its packages'
# scripts then run under qemu-user: qemu-user-static is installed when missing and its
# binfmt_misc entry registered (as root), as `docker run --privileged tonistiigi/binfmt` would.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cache=${IMAGE_CACHE:-$repo/target/image-cache}/debian
suite=bookworm
host_arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
arch=${DEBIAN_ARCH:-$host_arch}
log() { echo "debian-rootfs: $*" >&2; }

# One "URI SUITE" line per enabled deb source of the host.
host_sources() {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                           print $i, $(i + 1) }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'function flush() { if (deb && on) for (u in uris) for (s in suites) print uris[u], suites[s]
                                deb = 0; on = 1; delete uris; delete suites }
             BEGIN { on = 1 }
             /^[ \t]*$/ { flush(); next }
             /^#/ { next }
             tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
             tolower($1) == "enabled:" { on = (tolower($2) != "no") }
             tolower($1) == "uris:" { for (i = 2; i <= NF; i++) uris[i] = $i }
             tolower($1) == "suites:" { for (i = 2; i <= NF; i++) suites[i] = $i }
             END { flush() }' "$f"
    done
}

mirror_for() { # SUITE PATH_SUFFIX DEFAULT
    m=$(host_sources | awk -v s="$1" '$2 == s { print $1; exit }')
    [ -n "$m" ] || m=$(host_sources | awk -v p="$2" '$1 ~ p "/?$" { print $1; exit }')
    echo "${m:-$3}" | sed 's,/*$,,'
}
mirror=${DEBIAN_MIRROR:-$(mirror_for "$suite" /debian http://deb.debian.org/debian)}
security=${DEBIAN_SECURITY_MIRROR:-$(mirror_for "$suite-security" /debian-security http://deb.debian.org/debian-security)}

fetch() {
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --max-time 30 "$1"
    else
        python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=30).read())' "$1"
    fi
}

# The suites' InRelease dates: the archive's state, which the cache is keyed by.
snapshot() {
    if [ -n "${DEBIAN_SNAPSHOT:-}" ]; then echo "$DEBIAN_SNAPSHOT"; return; fi
    out=
    for ms in "$mirror $suite" "$mirror $suite-updates" "$security $suite-security"; do
        # shellcheck disable=SC2086 # two words on purpose
        set -- $ms
        d=$(fetch "$1/dists/$2/InRelease" 2>/dev/null | sed -n 's/^Date: //p' | head -n 1) || d=
        [ -n "$d" ] || return 0
        out="$out$2=$(date -u -d "$d" +%Y%m%dT%H%M%SZ 2>/dev/null || echo "$d" | tr -c 'A-Za-z0-9\n' _);"
    done
    echo "${out%;}"
}

sha() { sha256sum | cut -c1-"$1"; }

# The cache directory of minbase + PKGs on the snapshot, built when missing.
rootfs_dir() { # SNAPSHOT PKG...
    snap=$1
    shift
    pkgs=$(printf '%s\n' "$@" | sort -u | tr '\n' ' ' | sed 's/ $//')
    for p in $pkgs; do
        case $p in *[!a-z0-9.+:=~-]*) log "not a package name: $p"; exit 2 ;; esac
    done
    # Another architecture's trees have keys of their own; the host's add nothing.
    archkey=
    [ "$arch" = "$host_arch" ] || archkey=$arch
    # shellcheck disable=SC2086 # empty for the host's: no line at all
    pkgkey=$(printf '%s\n' "$suite" "$pkgs" "$mirror" "$security" "$(cat "$0")" $archkey | sha 12)
    if [ -z "$snap" ]; then
        # Offline: the newest tree of the same packages.
        dir=
        for d in "$cache/$suite-$pkgkey"-*; do
            case $d in *.tmp.*) continue ;; esac
            [ -f "$d/rootfs.tar" ] || continue
            t=$(stat -c %Y "$d/rootfs.tar")
            if [ -z "$dir" ] || [ "$t" -gt "$newest" ]; then dir=$d newest=$t; fi
        done
        if [ -z "$dir" ]; then
            log "cannot reach $mirror to resolve the snapshot, and nothing cached for: $pkgs"
            exit 1
        fi
        log "offline: using $dir"
        echo "$dir"
        return
    fi
    dir=$cache/$suite-$pkgkey-$(echo "$snap" | sha 12)
    if [ -f "$dir/rootfs.tar" ] && [ -d "$dir/rootfs" ]; then
        echo "$dir"
        return
    fi
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        log "installing mmdebstrap"
        apt-get install -y -q mmdebstrap >&2 || { apt-get update -q >&2 && apt-get install -y -q mmdebstrap >&2; }
    fi
    log "minbase + $pkgs on $mirror ($snap, $arch)"
    foreign_binfmt
    tmp=$dir.tmp.$$
    rm -rf "$tmp"
    mkdir -p "$tmp"
    include=$(echo "$pkgs" | tr ' ' ',')
    # merged-usr: the /usr symlinks without the usrmerge package (which pulls in perl).
    # The host's /etc/hostname and /etc/resolv.conf, which mmdebstrap copies in for apt,
    # are the runtime's to give.
    # shellcheck disable=SC2016 # mmdebstrap's hook expands $1 (the chroot)
    cleanup='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/etc/hostname "$1"/etc/resolv.conf'
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0} mmdebstrap --quiet --variant=minbase --architectures="$arch" \
        --include="$include" \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --aptopt='APT::Install-Recommends "false"' \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        --dpkgopt='path-exclude=/usr/share/lintian/*' \
        --dpkgopt='path-exclude=/usr/share/linda/*' \
        --customize-hook="$cleanup" \
        "$suite" "$tmp/raw.tar" \
        "deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main" >&2
    python3 "$here/oci-archive.py" layer -o "$tmp/rootfs.tar" "$tmp/raw.tar"
    rm -f "$tmp/raw.tar"
    mkdir "$tmp/rootfs"
    if [ "$(id -u)" = 0 ]; then
        tar -C "$tmp/rootfs" --numeric-owner -xpf "$tmp/rootfs.tar"
    else
        tar -C "$tmp/rootfs" -xf "$tmp/rootfs.tar"
    fi
    printf '%s\n' "suite=$suite" "arch=$arch" "packages=$pkgs" "mirror=$mirror" "security=$security" \
        "snapshot=$snap" >"$tmp/INFO"
    # Older snapshots of the same packages are superseded.
    for old in "$cache/$suite-$pkgkey"-*; do
        case $old in *.tmp.*) continue ;; esac
        [ -d "$old" ] && [ "$old" != "$dir" ] && { chmod -R u+w "$old" 2>/dev/null || true; rm -rf "$old"; }
    done
    rm -rf "$dir"
    mv "$tmp" "$dir"
    echo "$dir"
}

# Another architecture's programs (its packages' scripts, a check run in its tree) run through
# qemu-user's binfmt_misc entry, registered here when missing. The F flag of Debian's entry
# loads the interpreter at registration, so that it works inside a chroot too.
foreign_binfmt() {
    [ "$arch" != "$host_arch" ] || return 0
    case $arch in arm64) q=aarch64 ;; armhf | armel) q=arm ;; ppc64el) q=ppc64le ;; *) q=$arch ;; esac
    # arch-test: mmdebstrap checks with it that the architecture's programs run.
    if [ ! -f "/usr/lib/binfmt.d/qemu-$q.conf" ] || ! command -v arch-test >/dev/null 2>&1; then
        log "installing qemu-user-static and arch-test (to run $arch programs)"
        apt-get install -y -q qemu-user-static arch-test >&2 ||
            { apt-get update -q >&2 && apt-get install -y -q qemu-user-static arch-test >&2; }
    fi
    [ -e "/proc/sys/fs/binfmt_misc/qemu-$q" ] && return 0
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || {
        log "cannot mount binfmt_misc: $arch programs cannot run here"
        exit 1
    }
    cat "/usr/lib/binfmt.d/qemu-$q.conf" >/proc/sys/fs/binfmt_misc/register || {
        log "cannot register qemu-$q with binfmt_misc (as root?)"
        exit 1
    }
    log "registered qemu-$q with binfmt_misc"
}

run_in() { # ROOTFS DIR COMMAND...
    root=$1 over=$2
    shift 2
    scratch=$(dirname "$root")/run.$$
    rm -rf "$scratch"
    cp -al "$root" "$scratch"
    # --remove-destination: never write through a hard link into the cached tree.
    cp -a --remove-destination "$over/." "$scratch/"
    rc=0
    if [ "$(id -u)" = 0 ]; then
        chroot "$scratch" "$@" || rc=$?
    else
        unshare -r chroot "$scratch" "$@" || rc=$?
    fi
    rm -rf "$scratch"
    return "$rc"
}

lower=
case ${1:-} in
    --snapshot) snapshot; exit 0 ;;
    --run)
        if [ $# -lt 5 ] || [ "$4" != -- ]; then
            echo "usage: $0 --run ROOTFS DIR -- COMMAND..." >&2
            exit 2
        fi
        r=$2 o=$3
        shift 4
        foreign_binfmt
        run_in "$r" "$o" "$@"
        exit $?
        ;;
    --lower) lower=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d'; exit 0 ;;
esac
[ $# -gt 0 ] || { echo "usage: $0 [--lower \"PKG ...\"] PKG ... (see --help)" >&2; exit 2; }

snap=$(snapshot)
mkdir -p "$cache"
if [ -z "$lower" ]; then
    dir=$(rootfs_dir "$snap" "$@")
    echo "layer $dir/rootfs.tar"
else
    # shellcheck disable=SC2086 # a list of words
    low=$(rootfs_dir "$snap" $lower)
    # shellcheck disable=SC2086
    dir=$(rootfs_dir "$snap" $lower "$@")
    over=$dir/over-$(basename "$low").tar
    if [ ! -f "$over" ]; then
        python3 "$here/oci-archive.py" layer --base "$low/rootfs.tar" -o "$over" "$dir/rootfs.tar"
    fi
    echo "layer $low/rootfs.tar"
    echo "layer $over"
fi
echo "rootfs $dir/rootfs"

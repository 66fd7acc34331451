#!/usr/bin/env bash
# Every container image the lab cluster runs (tests/cluster/run.sh), built here as
# docker-archive tarballs that `ctr -n k8s.io images import FILE` loads on a node: no
# registry is reachable from the lab, and nothing is pulled. Built without an image builder:
# Debian bookworm root file systems from mmdebstrap (deploy/debian-rootfs.sh), the binaries
# that tests/cluster/build.sh and tests/peers/build.sh built, and deploy/oci-archive.py to
# write the archives (gzip-compressed layers, names as the manifests and e2e tests use them):
#
#   pause.tar            registry.k8s.io/pause:3.10.2, /pause from tests/cluster/pause.c
#                        (gcc -static), the sandbox image node.sh pins
#   glibc-dns-testing.tar  registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1: agnhost's
#                        Debian tree without agnhost (the DNS tests' glibc querier: dig, getent)
#   regression-issue-74839.tar  its e2e image: the program from the same module, on the
#                        lowest Debian layer
#   nginx.tar            registry.k8s.io/e2e-test-images/nginx:1.27.0-2: Debian's nginx
#   busybox.tar          registry.k8s.io/e2e-test-images/busybox:1.37.0-2: Debian's
#                        busybox-static and its applets in /bin, cmd ["sh"]
#   agnhost.tar          registry.k8s.io/e2e-test-images/agnhost:2.66.1: /agnhost (and
#                        /agnhost-2, as upstream's), entrypoint ["/agnhost"], cmd ["pause"],
#                        with what e2e tests exec in it (upstream's is Alpine with curl,
#                        bind-tools, netcat-openbsd, iproute2, busybox): curl, netcat-openbsd,
#                        iproute2, dnsutils, iputils-ping, wget, and busybox-static's applets where
#                        Debian has no program of that name (wget, ...)
#   kube-proxy.tar       registry.k8s.io/kube-proxy:v1.37.2: upstream kube-proxy at
#                        /usr/local/bin/kube-proxy with what its IPVS mode execs: iptables
#                        (legacy and nft), ipset, conntrack, kmod, and nft for its nftables
#                        mode (upstream's base, distroless-iptables, has them all and cannot be
#                        pulled); and ipvsadm, iproute2 and
#                        curl, which kube-proxy never runs: run.sh's capture pods read each
#                        node's state with them, whichever proxy runs
#   distroless-iptables.tar  registry.k8s.io/build-image/distroless-iptables:v0.9.9:
#                        kube-proxy's Debian tree without kube-proxy (iptables, conntrack,
#                        a shell), where e2e tests run commands on a node
#   flannel/flannel.tar  ghcr.io/flannel-io/flannel:v0.28.10: flanneld and install-conf in
#                        /opt/bin (tests/cluster/build.sh), entrypoint flanneld, with what it
#                        execs: iptables (legacy and nft), iproute2 (upstream's is Alpine)
#   flannel/flannel-cni-plugin.tar  localhost/flannel-cni-plugin:v0.9.1: /flannel, the CNI plugin that
#                        flannel's DaemonSet copies to the node's /opt/cni/bin, on the lowest
#                        Debian layer (its cp); not upstream's flannel-cni-plugin, which is
#                        built from flannel-io/cni-plugin, a module not served here
#                        (both in flannel/: only run.sh's --cni flannel puts them on the nodes)
#   metallb/controller.tar, metallb/speaker.tar  quay.io/metallb/controller:v0.16.1 and
#                        quay.io/metallb/speaker:v0.16.1: /controller and /speaker (layer 2,
#                        without FRR) on the lowest Debian layer, built only once
#                        tests/cluster/metallb/build.sh has built them (run.sh --lb metallb)
#   kube-proxy-ipvs.tar  localhost/kube-proxy-ipvs:dev, by deploy/build-image.sh --save
#                        (BUILDER=rootfs unless BUILDER says otherwise)
#
# The agent's, kube-proxy's and agnhost's Debian trees share their lowest layer (minbase and
# the agent's runtime packages), all on one Debian snapshot per run. Cached: the Debian trees
# under target/image-cache/debian (deploy/debian-rootfs.sh), and each tarball is rebuilt
# only when the hash of its inputs (binaries, sources, these scripts, the Debian layers)
# changed; a run with nothing changed takes seconds (cargo's check of the agent included).
#
#   tests/cluster/images.sh      prints the images' directory (target/cluster/images) last
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
deploy=$root/deploy
out=$root/target/cluster/images
work=$root/target/image-cache/cluster
agnhost_bin=$root/target/cluster/agnhost
flannel_dir=$root/target/cluster/flannel
metallb_dir=$root/target/cluster/metallb
kube_proxy_bin=$root/target/peers/kube-proxy
regression_bin=$root/target/cluster/regression-issue-74839
mkdir -p "$out/flannel" "$work/flannel"
log() { echo "images: $*" >&2; }
case ${1:-} in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;; esac

[[ -x $agnhost_bin ]] || { log "missing $agnhost_bin (tests/cluster/build.sh)"; exit 1; }
[[ -x $regression_bin ]] || { log "missing $regression_bin (tests/cluster/build.sh)"; exit 1; }
for b in flanneld install-conf flannel; do
    [[ -x $flannel_dir/$b ]] || { log "missing $flannel_dir/$b (tests/cluster/build.sh)"; exit 1; }
done
[[ -x $kube_proxy_bin ]] || { log "missing $kube_proxy_bin (tests/peers/build.sh)"; exit 1; }

# One Debian snapshot for every image of this run.
DEBIAN_SNAPSHOT=${DEBIAN_SNAPSHOT:-$("$deploy/debian-rootfs.sh" --snapshot)}
export DEBIAN_SNAPSHOT
export BUILDER=${BUILDER:-rootfs}
read -r -a agent_pkgs <<<"$("$deploy/build-image.sh" --packages)"

# The key of some inputs: files by their content, anything else as the string it is.
inputs_key() {
    local a
    for a in "$0" "$deploy/oci-archive.py" "$deploy/debian-rootfs.sh" "$@"; do
        if [[ -f $a ]]; then sha256sum <"$a"; else printf '%s\n' "$a"; fi
    done | sha256sum | cut -d' ' -f1
}
fresh() { # NAME KEY: is $out/NAME.tar built from these inputs?
    [[ -f $out/$1.tar && -f $work/$1.key && $(cat "$work/$1.key") == "$2" ]]
}
built() { # NAME KEY START
    echo "$2" >"$work/$1.key"
    log "$1: built in $((SECONDS - $3))s, $(du -h "$out/$1.tar" | cut -f1)"
}
# A Debian tree's layers (lowest first) into the array layers, its unpacked tree into rootfs.
debian() {
    local lines
    lines=$("$deploy/debian-rootfs.sh" "$@")
    mapfile -t layers < <(sed -n 's/^layer //p' <<<"$lines")
    rootfs=$(sed -n 's/^rootfs //p' <<<"$lines")
}
image() { # NAME ARGS... (oci-archive.py image's)
    local name=$1
    shift
    python3 "$deploy/oci-archive.py" image --gzip -o "$out/$name.tar" "$@"
}

# --- pause ---------------------------------------------------------------------------------
t=$SECONDS
key=$(inputs_key "$here/pause.c" "$(gcc --version | head -n 1)")
if ! fresh pause "$key"; then
    d=$work/pause
    rm -rf "$d"
    mkdir -p "$d"
    gcc -static -Os -s -Wall -Wextra -Werror -o "$d/pause" "$here/pause.c"
    "$d/pause" -v >&2
    image pause --tag registry.k8s.io/pause:3.10.2 --entrypoint '["/pause"]' "$d"
    built pause "$key" "$t"
fi

# --- agnhost (and busybox, from the same Debian tree) ------------------------------------
t=$SECONDS
# Debian's wget, not busybox 1.35's: its `wget -T N`, which e2e tests run to check a Service
# ("received [Segmentation fault]"), segfaults.
debian --lower "${agent_pkgs[*]}" busybox-static curl wget netcat-openbsd iproute2 dnsutils iputils-ping ca-certificates
agn_layers=("${layers[@]}") agn_rootfs=$rootfs
key=$(inputs_key "$agnhost_bin" "${agn_layers[@]}")
if ! fresh agnhost "$key"; then
    d=$work/agnhost
    rm -rf "$d"
    mkdir -p "$d/usr/bin"
    install -m 0755 "$agnhost_bin" "$d/agnhost"
    ln "$d/agnhost" "$d/agnhost-2"
    # busybox's applets that Debian's packages left unprovided (/bin is /usr/bin: merged-usr).
    added=()
    for a in $("$agn_rootfs/usr/bin/busybox" --list); do
        [[ $a == busybox ]] && continue
        if [[ ! -e $agn_rootfs/usr/bin/$a && ! -L $agn_rootfs/usr/bin/$a &&
            ! -e $agn_rootfs/usr/sbin/$a && ! -L $agn_rootfs/usr/sbin/$a ]]; then
            ln -s busybox "$d/usr/bin/$a"
            added+=("$a")
        fi
    done
    log "agnhost: ${#added[@]} busybox applets added: ${added[*]}"
    # What e2e tests run in agnhost pods, found in the image (fails the build, not a test).
    # shellcheck disable=SC2016 # for the image's shell
    "$deploy/debian-rootfs.sh" --run "$agn_rootfs" "$d" -- /bin/sh -c '
        for t in sh curl nc wget cat echo sleep ip hostname timeout dig nslookup ping ps \
                 grep sed awk head tail tr sort wc env id date ls mkdir rm kill; do
            command -v "$t" >/dev/null || { echo "agnhost image: no $t" >&2; exit 1; }
        done
        /agnhost --help >/dev/null && curl --version >/dev/null && dig -v 2>/dev/null && ip -V'
    image agnhost --tag registry.k8s.io/e2e-test-images/agnhost:2.66.1 \
        --entrypoint '["/agnhost"]' --cmd '["pause"]' "${agn_layers[@]}" "$d"
    built agnhost "$key" "$t"
fi

# The DNS tests' glibc querier (upstream's is Debian with dig): agnhost's Debian tree, which
# has dig and getent, without agnhost.
key=$(inputs_key "${agn_layers[@]}")
if ! fresh glibc-dns-testing "$key"; then
    image glibc-dns-testing --tag registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1 \
        "${agn_layers[@]}"
    built glibc-dns-testing "$key" "$t"
fi
# The Conntrack test's server (test/images/regression-issue-74839, built with agnhost), on
# the lowest Debian layer as upstream's is on debian-base.
t=$SECONDS
key=$(inputs_key "$regression_bin" "${agn_layers[0]}")
if ! fresh regression-issue-74839 "$key"; then
    d=$work/regression-issue-74839
    rm -rf "$d"
    mkdir -p "$d"
    install -m 0755 "$regression_bin" "$d/regression-issue-74839"
    image regression-issue-74839 --tag registry.k8s.io/e2e-test-images/regression-issue-74839:1.5 \
        --entrypoint '["/regression-issue-74839"]' "${agn_layers[0]}" "$d"
    built regression-issue-74839 "$key" "$t"
fi

# --- nginx -----------------------------------------------------------------------------------
# What the EndpointSlice and Endpoints tests run as their pods: Debian's nginx, serving its
# default page on port 80 in the foreground.
t=$SECONDS
debian --lower "${agent_pkgs[*]}" nginx
key=$(inputs_key "${layers[@]}")
if ! fresh nginx "$key"; then
    # The Debian trees are built without /var/log's contents; nginx opens its logs there.
    d=$work/nginx
    rm -rf "$d"
    mkdir -p "$d/var/log/nginx" "$d/var/lib/nginx"
    "$deploy/debian-rootfs.sh" --run "$rootfs" "$d" -- /usr/sbin/nginx -t >&2
    image nginx --tag registry.k8s.io/e2e-test-images/nginx:1.27.0-2 \
        --entrypoint '["/usr/sbin/nginx", "-g", "daemon off;"]' "${layers[@]}" "$d"
    built nginx "$key" "$t"
fi

# --- busybox ---------------------------------------------------------------------------------
t=$SECONDS
key=$(inputs_key "$agn_rootfs/usr/bin/busybox")
if ! fresh busybox "$key"; then
    d=$work/busybox
    rm -rf "$d"
    mkdir -p "$d/bin" "$d/etc" "$d/root" "$d/home" "$d/tmp" "$d/var/tmp"
    chmod 1777 "$d/tmp" "$d/var/tmp"
    chmod 0700 "$d/root"
    install -m 0755 "$agn_rootfs/usr/bin/busybox" "$d/bin/busybox"
    for a in $("$d/bin/busybox" --list); do
        [[ $a == busybox ]] || ln -s busybox "$d/bin/$a"
    done
    printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/home:/bin/false' >"$d/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$d/etc/group"
    "$d/bin/busybox" sh -c 'echo ok' >/dev/null
    image busybox --tag registry.k8s.io/e2e-test-images/busybox:1.37.0-2 --cmd '["sh"]' "$d"
    built busybox "$key" "$t"
fi

# --- kube-proxy ------------------------------------------------------------------------------
t=$SECONDS
debian --lower "${agent_pkgs[*]}" ipset conntrack ipvsadm iproute2 curl nftables
key=$(inputs_key "$kube_proxy_bin" "${layers[@]}")
if ! fresh kube-proxy "$key"; then
    d=$work/kube-proxy
    rm -rf "$d"
    mkdir -p "$d/usr/local/bin"
    install -m 0755 "$kube_proxy_bin" "$d/usr/local/bin/kube-proxy"
    "$deploy/debian-rootfs.sh" --run "$rootfs" "$d" -- /bin/sh -c '
        /usr/local/bin/kube-proxy --version && iptables-legacy --version && iptables-nft --version &&
        ip6tables-legacy --version && ipset --version && conntrack --version && modprobe --version &&
        nft --version && command -v ipvsadm && ip -V && curl --version >/dev/null' >&2
    image kube-proxy --tag registry.k8s.io/kube-proxy:v1.37.2 "${layers[@]}" "$d"
    built kube-proxy "$key" "$t"
fi
# The same Debian tree, without kube-proxy, as the image e2e tests run host commands in
# (the KubeProxy CLOSE_WAIT test reads the node's conntrack table with it).
key=$(inputs_key "${layers[@]}")
if ! fresh distroless-iptables "$key"; then
    image distroless-iptables --tag registry.k8s.io/build-image/distroless-iptables:v0.9.9 \
        "${layers[@]}"
    built distroless-iptables "$key" "$t"
fi

# --- flannel ---------------------------------------------------------------------------------
t=$SECONDS
debian --lower "${agent_pkgs[*]}" iproute2
key=$(inputs_key "$flannel_dir/flanneld" "$flannel_dir/install-conf" "${layers[@]}")
if ! fresh flannel/flannel "$key"; then
    d=$work/flannel-tree
    rm -rf "$d"
    mkdir -p "$d/opt/bin"
    install -m 0755 "$flannel_dir/flanneld" "$flannel_dir/install-conf" "$d/opt/bin/"
    "$deploy/debian-rootfs.sh" --run "$rootfs" "$d" -- /bin/sh -c '
        /opt/bin/flanneld --version && iptables-legacy --version && iptables-nft --version &&
        ip -V' >&2
    image flannel/flannel --tag ghcr.io/flannel-io/flannel:v0.28.10 --entrypoint '["/opt/bin/flanneld"]' \
        "${layers[@]}" "$d"
    built flannel/flannel "$key" "$t"
fi
key=$(inputs_key "$flannel_dir/flannel" "${agn_layers[0]}")
if ! fresh flannel/flannel-cni-plugin "$key"; then
    d=$work/flannel-cni-plugin-tree
    rm -rf "$d"
    mkdir -p "$d"
    install -m 0755 "$flannel_dir/flannel" "$d/flannel"
    image flannel/flannel-cni-plugin --tag localhost/flannel-cni-plugin:v0.9.1 "${agn_layers[0]}" "$d"
    built flannel/flannel-cni-plugin "$key" "$t"
fi

# --- MetalLB (only once its programs are built) ----------------------------------------------
if [[ -x $metallb_dir/controller && -x $metallb_dir/speaker ]]; then
    mkdir -p "$out/metallb" "$work/metallb"
    for program in controller speaker; do
        t=$SECONDS
        key=$(inputs_key "$metallb_dir/$program" "${agn_layers[0]}")
        if ! fresh "metallb/$program" "$key"; then
            d=$work/metallb-$program-tree
            rm -rf "$d"
            mkdir -p "$d"
            install -m 0755 "$metallb_dir/$program" "$d/$program"
            image "metallb/$program" --tag "quay.io/metallb/$program:v0.16.1" \
                --entrypoint "[\"/$program\"]" "${agn_layers[0]}" "$d"
            built "metallb/$program" "$key" "$t"
        fi
    done
fi

# --- the agent -------------------------------------------------------------------------------
t=$SECONDS
# CARGO_PROFILE=labtest (the test command): the agent the lab tests just ran, from the lab's
# own build command (a no-op then; building the binary alone would unify other features and
# compile again), instead of a release build.
profile=${CARGO_PROFILE:-release}
if [[ $profile == labtest ]]; then
    (cd "$root" && cargo test --no-run --quiet --all-features --workspace --profile labtest)
else
    (cd "$root" && cargo build --profile "$profile" --locked -p kube-proxy-ipvs-agent)
fi
export AGENT_BINARY=$root/target/$profile/kube-proxy-ipvs
debian "${agent_pkgs[@]}"
key=$(inputs_key "$root/target/$profile/kube-proxy-ipvs" "$deploy/init-sysctls.sh" \
    "$deploy/Containerfile" "$deploy/build-image.sh" "$BUILDER" "${layers[@]}")
if ! fresh kube-proxy-ipvs "$key"; then
    "$deploy/build-image.sh" --save "$out/kube-proxy-ipvs.tar" >&2
    built kube-proxy-ipvs "$key" "$t"
fi

for f in "$out"/*.tar "$out"/flannel/*.tar "$out"/metallb/*.tar; do
    [[ -f $f ]] || continue
    log "$(du -h "$f" | cut -f1)	$(basename "$f")"
done
echo "$out"

#!/bin/bash
# Builds the lab cluster's upstream programs from pinned Go modules (the Go module proxy
# only, nothing vendored, nothing downloaded from release pages) into target/cluster:
#   k8s/go.mod (k8s.io/kubernetes v1.37.2, like tests/peers): kubelet,
#     kube-controller-manager, kube-scheduler, agnhost, regression-issue-74839 (the Conntrack
#     test's server), e2e.test, and ginkgo (the runner)
#   each at its own module's pinned version and go.sum (`go install module@version`):
#     containerd, containerd-shim-runc-v2 and ctr v2.2.9, runc v1.4.0 (cgo, static, with seccomp),
#     the CNI plugins bridge, host-local, loopback and portmap v1.9.1, CoreDNS v1.14.7
#   flannel/go.mod (github.com/flannel-io/flannel v0.28.10): flanneld and install-conf, as
#     flannel's image has them (cgo, static, for its UDP backend, as flannel's Makefile); and
#     the flannel CNI plugin of containernetworking/plugins v0.9.1, its last home that the
#     module proxy serves (flannel-io/cni-plugin, where it moved, is not served), into
#     target/cluster/flannel: the images of run.sh's --cni flannel
# Cached: skipped when target/cluster/STAMP matches the inputs and the Go version. Prints
# the directory on its last line.
#   tests/cluster/build.sh [--force]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$root/target/cluster
mkdir -p "$out/bin"
if ! command -v go >/dev/null; then
    echo "cluster: Go (1.26 or newer) is needed to build the cluster's programs" >&2
    exit 1
fi
runtime=(
    github.com/containerd/containerd/v2/cmd/containerd@v2.2.9
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v2.2.9
    github.com/containerd/containerd/v2/cmd/ctr@v2.2.9
    github.com/containernetworking/plugins/plugins/main/bridge@v1.9.1
    github.com/containernetworking/plugins/plugins/main/loopback@v1.9.1
    github.com/containernetworking/plugins/plugins/ipam/host-local@v1.9.1
    github.com/containernetworking/plugins/plugins/meta/portmap@v1.9.1
    github.com/coredns/coredns@v1.14.7
)
runc=github.com/opencontainers/runc@v1.4.0
flannel_cni=github.com/containernetworking/plugins/plugins/meta/flannel@v0.9.1
stamp=$( (go version; cat "$here/k8s/go.mod" "$here/k8s/go.sum" "$here/flannel/go.mod" "$here/flannel/go.sum" \
    "$here/build.sh") | sha256sum | cut -c1-16)
k8s_bins=(kubelet kube-controller-manager kube-scheduler agnhost regression-issue-74839 e2e.test ginkgo)
rt_bins=(containerd containerd-shim-runc-v2 ctr bridge loopback host-local portmap coredns runc kubelet)
flannel_bins=(flanneld install-conf flannel)
if [[ "${1:-}" != --force && -f "$out/STAMP" && "$(cat "$out/STAMP")" == "$stamp" ]]; then
    ok=1
    for b in "${k8s_bins[@]}"; do [[ -x "$out/$b" ]] || ok=0; done
    for b in "${rt_bins[@]}"; do [[ -x "$out/bin/$b" ]] || ok=0; done
    for b in "${flannel_bins[@]}"; do [[ -x "$out/flannel/$b" ]] || ok=0; done
    if [[ $ok == 1 ]]; then echo "cluster: programs cached ($stamp)" >&2; echo "$out"; exit 0; fi
fi
start=$(date +%s)
v=k8s.io/component-base/version
ldflags="-s -w -X $v.gitVersion=v1.37.2 -X $v.gitMajor=1 -X $v.gitMinor=37 -X $v.gitTreeState=clean"
(
    cd "$here/k8s"
    # shellcheck disable=SC2030 # this subshell's own
    export CGO_ENABLED=0 GOFLAGS=-mod=readonly
    echo "cluster: building kubelet, kube-controller-manager, kube-scheduler, agnhost" >&2
    go build -trimpath -ldflags="$ldflags" -o "$out/" \
        k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/test/images/agnhost \
        k8s.io/kubernetes/test/images/regression-issue-74839
    # ginkgo's runner, at the version e2e.test links: it runs the tests in parallel.
    go build -trimpath -ldflags="-s -w" -o "$out/" github.com/onsi/ginkgo/v2/ginkgo
    echo "cluster: building e2e.test" >&2
    go test -c -trimpath -ldflags="$ldflags" -o "$out/e2e.test" k8s.io/kubernetes/test/e2e
)
echo "cluster: building containerd, the CNI plugins, CoreDNS, runc" >&2
# shellcheck disable=SC2031 # the subshell above set its own GOFLAGS
export GOBIN=$out/bin GOFLAGS=-trimpath
for m in "${runtime[@]}"; do
    CGO_ENABLED=0 go install -ldflags="-s -w" "$m"
done
# runc's nsenter is C: cgo, linked statically (libseccomp too: kubelet asks for the
# RuntimeDefault seccomp profile) so that the node needs no libraries for it.
CGO_ENABLED=1 go install -tags 'seccomp netgo osusergo' -ldflags='-s -w -extldflags=-static' "$runc"
echo "cluster: building flannel" >&2
mkdir -p "$out/flannel"
(
    cd "$here/flannel"
    # netgo and osusergo: a static binary that needs no glibc at run time (as runc above).
    CGO_ENABLED=1 GOFLAGS=-mod=readonly go build -trimpath -tags 'netgo osusergo' \
        -ldflags="-s -w -X github.com/flannel-io/flannel/pkg/version.Version=v0.28.10 -extldflags=-static" \
        -o "$out/flannel/flanneld" github.com/flannel-io/flannel
    CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags="-s -w" \
        -o "$out/flannel/install-conf" github.com/flannel-io/flannel/cmd/install_conf
)
# Not in bin/ (containerd's CNI directory): flannel's DaemonSet copies it to /opt/cni/bin.
CGO_ENABLED=0 GOBIN=$out/flannel go install -ldflags="-s -w" "$flannel_cni"
# The node's programs in one directory (the VM's PATH): kubelet beside containerd and runc.
ln -f "$out/kubelet" "$out/bin/kubelet"
echo "$stamp" >"$out/STAMP"
echo "cluster: programs built in $(($(date +%s) - start))s" >&2
echo "$out"

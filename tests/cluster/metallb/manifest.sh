#!/bin/bash
# MetalLB v0.16.1 as its own manifest deploys it (config/manifests/metallb-native.yaml of the
# module tests/cluster/metallb/go.mod pins), unchanged: its images are the ones
# tests/cluster/images.sh builds under the same names. With --pool PREFIX, instead: an
# IPAddressPool of PREFIX.200-PREFIX.219 (on the nodes' network, outside every node's and
# the host's address) and an L2Advertisement of it, applied once the controller (their
# validating webhook) is Ready.
#   tests/cluster/metallb/manifest.sh            the manifest
#   tests/cluster/metallb/manifest.sh --pool 192.168.60
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ ${1:-} == --pool ]]; then
    [[ ${2:-} =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "metallb: --pool takes a /24's first three octets" >&2; exit 2; }
    cat <<YAML
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: lab
  namespace: metallb-system
spec:
  addresses:
  - $2.200-$2.219
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  name: lab
  namespace: metallb-system
spec:
  ipAddressPools:
  - lab
YAML
    exit 0
fi
dir=$(cd "$here" && go list -m -f '{{.Dir}}' go.universe.tf/metallb)
file=$dir/config/manifests/metallb-native.yaml
for image in quay.io/metallb/controller:v0.16.1 quay.io/metallb/speaker:v0.16.1; do
    grep -q "image: $image\$" "$file" || { echo "metallb: $file does not run $image" >&2; exit 1; }
done
cat "$file"

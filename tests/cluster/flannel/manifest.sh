#!/bin/bash
# flannel as kube-flannel.yml deploys it: the manifest of the pinned module (go.mod's
# github.com/flannel-io/flannel, its Documentation/kube-flannel.yml), printed with only what
# the lab must change, each checked to have applied (a new release that moved it fails here):
#   - the CNI plugin's image: localhost/flannel-cni-plugin:v0.9.1 (tests/cluster/images.sh),
#     for ghcr.io/flannel-io/flannel-cni-plugin, which cannot be pulled or built here;
#   - the CNI configuration's cniVersion 0.4.0 for 1.0.0: the newest that plugin (v0.9.1) knows;
#   - the pod network, NETWORK (the cluster's --cluster-cidr), for 10.244.0.0/16.
# flannel's own image keeps its name (ghcr.io/flannel-io/flannel:v0.28.10): the lab builds it.
#
#   tests/cluster/flannel/manifest.sh NETWORK
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
network=${1:?usage: manifest.sh NETWORK}
dir=$(cd "$here" && GOFLAGS=-mod=readonly go mod download -json github.com/flannel-io/flannel |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
python3 - "$dir/Documentation/kube-flannel.yml" "$network" <<'PY'
import sys
path, network = sys.argv[1:]
text = open(path).read()
for old, new in (
    ("ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3", "localhost/flannel-cni-plugin:v0.9.1"),
    ('"cniVersion": "1.0.0"', '"cniVersion": "0.4.0"'),
    ('"Network": "10.244.0.0/16"', f'"Network": "{network}"'),
):
    if text.count(old) != 1:
        sys.exit(f"flannel manifest: {path} has {text.count(old)} of {old!r}, not one")
    text = text.replace(old, new)
sys.stdout.write(text)
PY

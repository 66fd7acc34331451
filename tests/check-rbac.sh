#!/bin/bash
# deploy/rbac.yaml against the real system:node-proxier, the ClusterRole a kube-apiserver
# creates for kube-proxy (the lab's control plane: etcd and kube-apiserver from
# tests/peers/build.sh, on this host). Both roles are read back from the API server and
# compared as (API group, resource, verb) triples:
#   - the agent's role grants nothing that system:node-proxier does not;
#   - what it leaves out is exactly the list below, each with the reason the agent does not
#     need it (rbac.yaml's comments say the same);
#   - the agent's service account can do what the agent does (list and watch Services, Nodes,
#     EndpointSlices; create events.k8s.io Events) and nothing it leaves out (kubectl auth can-i).
#
#   tests/check-rbac.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tmp=$(mktemp -d)
# shellcheck source=tests/control-plane.sh
. tests/control-plane.sh
cleanup() {
    control_plane_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "check-rbac: FAIL: $*" >&2
    exit 1
}

# What system:node-proxier grants and the agent's role leaves out, group/resource/verb, with why.
cat >"$tmp/left-out" <<'EOF'
/endpoints/list	the agent reads EndpointSlices only, never the legacy Endpoints API
/endpoints/watch	the agent reads EndpointSlices only, never the legacy Endpoints API
/nodes/get	the agent lists and watches its own Node (a field selector), it never gets one
/events/create	the agent writes events.k8s.io/v1 Events only
/events/patch	the agent writes events.k8s.io/v1 Events only
/events/update	the agent writes events.k8s.io/v1 Events only
events.k8s.io/events/patch	each Event is created once, never counted up by a patch
events.k8s.io/events/update	each Event is created once, never updated
networking.k8s.io/servicecidrs/list	the agent reads no ServiceCIDRs: IPVS mode filters ClusterIPs by the Services' own addresses (KUBE-CLUSTER-IP)
networking.k8s.io/servicecidrs/watch	the agent reads no ServiceCIDRs: IPVS mode filters ClusterIPs by the Services' own addresses (KUBE-CLUSTER-IP)
EOF

control_plane_start "$tmp"
k() { "$repo/target/peers/kubectl" --kubeconfig "$CONTROL_PLANE_DIR/admin-host.kubeconfig" "$@"; }

# The bootstrap roles appear shortly after the API server answers.
for _ in $(seq 1 60); do
    k get clusterrole system:node-proxier -o json >"$tmp/real.json" 2>/dev/null && break
    sleep 1
done
[ -s "$tmp/real.json" ] || fail "the API server made no system:node-proxier"
k apply -f deploy/rbac.yaml >/dev/null
k get clusterrole kube-proxy-ipvs -o json >"$tmp/ours.json"

python3 - "$tmp/real.json" "$tmp/ours.json" "$tmp/left-out" <<'EOF' || fail "deploy/rbac.yaml is not system:node-proxier less the list in tests/check-rbac.sh"
import json, sys
def triples(path):
    out = set()
    for rule in json.load(open(path)).get("rules", []):
        for g in rule.get("apiGroups", []):
            for r in rule.get("resources", []):
                for v in rule.get("verbs", []):
                    out.add(f"{g}/{r}/{v}")
    return out
real, ours = triples(sys.argv[1]), triples(sys.argv[2])
left_out = {l.split("\t")[0] for l in open(sys.argv[3]) if l.strip()}
bad = False
for t in sorted(ours - real):
    print(f"check-rbac: the agent's role grants {t}, which system:node-proxier does not", file=sys.stderr)
    bad = True
for t in sorted((real - ours) - left_out):
    print(f"check-rbac: system:node-proxier grants {t}; the agent's role leaves it out without a reason", file=sys.stderr)
    bad = True
for t in sorted(left_out - (real - ours)):
    print(f"check-rbac: {t} is listed as left out, but it is not (no longer in system:node-proxier, or granted)", file=sys.stderr)
    bad = True
print(f"check-rbac: system:node-proxier {sorted(real)}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

# The service account, as the API server's authorizer sees it.
as=(--as=system:serviceaccount:kube-system:kube-proxy-ipvs)
for can in "list services" "watch services" "list nodes" "watch nodes" \
    "list endpointslices.discovery.k8s.io" "watch endpointslices.discovery.k8s.io" \
    "create events.events.k8s.io -n default"; do
    # shellcheck disable=SC2086 # the verb, the resource and a namespace, split
    [ "$(k auth can-i "${as[@]}" $can 2>/dev/null)" = yes ] || fail "the agent's account cannot $can"
done
for cannot in "list endpoints" "get nodes" "create events -n default" "patch events.events.k8s.io -n default" \
    "get secrets -n kube-system" "update services"; do
    # shellcheck disable=SC2086
    [ "$(k auth can-i "${as[@]}" $cannot 2>/dev/null || true)" = no ] || fail "the agent's account can $cannot"
done
echo "check-rbac: deploy/rbac.yaml is system:node-proxier less $(wc -l <"$tmp/left-out") grants the agent never uses, each with its reason"

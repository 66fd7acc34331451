#!/bin/bash
# deploy/rbac.yaml, deploy/configmap.yaml and deploy/daemonset.yaml are the Helm chart in
# deploy/chart rendered with its default values, in kube-system: one source for both ways to
# install (kubectl apply of these files, or the chart). This writes them from the chart; with
# --check it writes nothing and fails when a file is not what the chart gives.
#
#   deploy/render.sh [--check]
#   deploy/render.sh --print-helm    builds helm if needed and prints its path
#
# helm v3.22.0 is built from its Go module on first use (Go 1.26 or newer), into
# target/tools/helm-v3.22.0; HELM names another helm binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
check=0 print_helm=0
case ${1:-} in
    --check) check=1 ;;
    --print-helm) print_helm=1 ;;
    "") ;;
    *) echo "render: unknown argument $1 (deploy/render.sh [--check | --print-helm])" >&2; exit 2 ;;
esac
helm_version=v3.22.0
helm=${HELM:-$root/target/tools/helm-$helm_version/helm}
if [[ ! -x $helm ]]; then
    command -v go >/dev/null || { echo "render: helm is built with Go (1.26 or newer), which is not on PATH; or set HELM" >&2; exit 1; }
    echo "render: building helm $helm_version from its Go module" >&2
    GOBIN=$(dirname "$helm") CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags='-s -w' "helm.sh/helm/v3/cmd/helm@$helm_version" >&2
fi
if [[ $print_helm == 1 ]]; then
    echo "$helm"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$helm" template kube-proxy-ipvs "$here/chart" --namespace kube-system >"$work/all.yaml"
# helm prints each document after "---" and "# Source: CHART/templates/NAME"; the documents of
# one template become one file again.
python3 - "$work/all.yaml" "$work" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
files = {}
for doc in re.split(r"^---\n", text, flags=re.M):
    m = re.match(r"# Source: [^/]+/templates/([^\n]+)\n", doc)
    if not m:
        continue
    files.setdefault(m.group(1), []).append(doc[m.end():].rstrip("\n") + "\n")
for name, docs in files.items():
    open(f"{sys.argv[2]}/{name}", "w").write("---\n".join(docs))
EOF
rc=0
for name in rbac.yaml configmap.yaml daemonset.yaml; do
    [[ -f $work/$name ]] || { echo "render: the chart rendered no $name" >&2; exit 1; }
    if [[ $check == 1 ]]; then
        if ! diff -u "$here/$name" "$work/$name" >"$work/diff"; then
            echo "render: deploy/$name is not the chart's rendering (run deploy/render.sh):" >&2
            head -40 "$work/diff" >&2
            rc=1
        fi
    else
        cp "$work/$name" "$here/$name"
    fi
done
[[ $check == 1 && $rc == 0 ]] && echo "render: deploy/rbac.yaml, configmap.yaml and daemonset.yaml are the chart's rendering"
exit "$rc"

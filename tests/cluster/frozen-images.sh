#!/bin/bash
# The images every shard of one agent build runs (shard.sh, e2e.sh --swap): a copy of
# tests/cluster/images.sh's tarballs kept under target/cluster/frozen/AGENT_COMMIT, made by
# the first shard of that build. Without it, shards run on different days would not run the
# same images: each images.sh run builds its Debian trees on the mirror's newest snapshot, so
# kube-proxy's, agnhost's and the agent's images change with every Debian security update.
# An image that a later harness commit adds is copied in; one already frozen is never
# replaced. Prints the directory.
#
#   tests/cluster/frozen-images.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
agent_commit=$(bash "$here/agent-commit.sh")
if [[ $agent_commit == *+local-changes ]]; then
    echo "frozen-images: the agent's inputs have local changes: commit them first" >&2
    exit 1
fi
images=$(bash "$here/images.sh" | tail -1)
frozen=$root/target/cluster/frozen/$agent_commit
mkdir -p "$frozen"
# With the images of the optional layers (flannel/, metallb/), where run.sh looks for them.
for f in "$images"/*.tar "$images"/*/*.tar; do
    [[ -e $f ]] || continue
    name=${f#"$images"/}
    if [[ ! -e $frozen/$name ]]; then
        mkdir -p "$(dirname "$frozen/$name")"
        cp "$f" "$frozen/$name"
        echo "frozen-images: $name frozen for $agent_commit" >&2
    fi
done
echo "$frozen"

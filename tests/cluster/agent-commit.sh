#!/bin/bash
# The agent's commit as the e2e records name it: the last commit that changed what goes into
# its image (the crates and Cargo files, which build.rs stamps, and the image's own build
# files), with "+local-changes" when those differ from HEAD. run.sh records it;
# frozen-images.sh keys the frozen images by it.
#
#   tests/cluster/agent-commit.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
paths=(crates Cargo.toml Cargo.lock deploy/Containerfile deploy/build-image.sh
    deploy/init-sysctls.sh deploy/debian-rootfs.sh deploy/oci-archive.py)
commit=$(git log -1 --format=%H -- "${paths[@]}")
git diff --quiet HEAD -- "${paths[@]}" || commit="$commit+local-changes"
echo "$commit"

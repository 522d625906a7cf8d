#!/usr/bin/env bash
# Brings tests/adding_a_kind/boot-script.patch (the demonstration kind of docs/design.md,
# "Adding a kind") up to date with the tree: applies it three-way, regenerates every file
# derived from the kind registry, writes the difference from HEAD back over the patch, and
# leaves the tree as it was. tests/adding_a_kind.rs then checks the result.
#
#   scripts/update-adding-a-kind-patch.sh              # needs a clean working tree
#   scripts/update-adding-a-kind-patch.sh --continue   # after resolving a conflict it reported
#
# Everything but the patch is reset to HEAD at the end, hence the clean working tree.
set -euo pipefail
cd "$(dirname "$0")/.."

PATCH=tests/adding_a_kind/boot-script.patch

if [ "${1:-}" != "--continue" ]; then
  if [ -n "$(git status --porcelain)" ]; then
    echo "the working tree has changes: commit or stash them first" >&2
    exit 1
  fi
  if ! git apply --3way "$PATCH"; then
    echo "resolve the conflicts git names above (the kind's side is the patch's), then run" >&2
    echo "  $0 --continue" >&2
    exit 1
  fi
fi

# The generating tests alone: others, such as the docs' count of kinds, rightly fail on a
# tree with one kind more than the docs say.
UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry
UPDATE_GENERATED=1 cargo test --test deploy_chart -- \
  chart_and_kustomize_crds_are_the_generated_crds kustomize_base_renders_what_the_chart_renders
UPDATE_GENERATED=1 cargo test --test argocd_health -- argocd_cm_installs_the_script_for_every_kind

updated="$(mktemp)"
git add --all
git -c color.ui=never diff --no-ext-diff --cached HEAD > "$updated"
git reset --quiet --hard HEAD
mv "$updated" "$PATCH"
chmod 644 "$PATCH"
echo "$PATCH: $(grep -c '^diff --git' "$PATCH") files"

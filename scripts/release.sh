#!/usr/bin/env bash
# The release artifacts, made the same way by CI (.ci/run) and by hand:
#   target/dist/gpucloud-operator-<version>.tgz  the Helm chart, packaged
#   target/dist/index.yaml                       a Helm repository index of target/dist/
#   target/dist/docker-build.sh                  the image's `docker build` command (also printed)
#   target/dist/gpucloud-operator.cdx.json       the SBOM of the binary's crates (CycloneDX 1.5,
#                                                scripts/sbom.py, from `cargo tree` and Cargo.lock)
#   target/dist/SHA256SUMS                       the SHA-256 of every file above
# It refuses a chart whose version or appVersion is not the operator crate's version, and a
# chart `helm lint --strict` finds anything in. It needs python3 with venv and PyPI access
# (.ci/python-tools.sh) and cargo; no helm binary, no container runtime.
# Environment: CHART and DIST (default charts/gpucloud-operator and target/dist);
# IMAGE_REPOSITORY (default gpucloud-operator, a local image name until the project has a
# registry); SOURCE_URL (the image's org.opencontainers.image.source label, empty by default);
# SOURCE_DATE_EPOCH (the image's creation date; default now; the SBOM's date, default the
# commit's); BUILD_IMAGE, BUILD_IMAGE_STATIC, RUNTIME_IMAGE, RUNTIME_IMAGE_STATIC (base images
# pinned by digest, passed on to the build when set; the Dockerfile's tags otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."

CHART="${CHART:-charts/gpucloud-operator}"
DIST="${DIST:-target/dist}"
PYTHON="$(.ci/python-tools.sh)"

VERSION="$(cargo metadata --no-deps --format-version 1 --offline | "$PYTHON" -c '
import json, sys
packages = json.load(sys.stdin)["packages"]
print(next(p["version"] for p in packages if p["name"] == "gpucloud-operator"))')"

"$PYTHON" - "$CHART" "$DIST" "$VERSION" <<'EOF'
import glob
import os
import sys

import helm_python

chart_dir, dist, version = sys.argv[1:4]
metadata = helm_python.Chart.load(chart_dir).metadata
wrong = [f"{key} {metadata.get(key)!r}" for key in ("version", "appVersion")
         if metadata.get(key) != version]
if wrong:
    sys.exit(f"{chart_dir}/Chart.yaml has {' and '.join(wrong)}; both must be the operator "
             f"crate's version {version} (Cargo.toml, [workspace.package] version)")
lint = helm_python.lint(chart_dir, strict=True, namespace="gpucloud-system")
findings = [f"{m['path']}: {m['error']}" for m in lint["messages"] if m["severity"] >= 2]
if findings or lint["errors"]:
    sys.exit("helm lint --strict " + chart_dir + ":\n  "
             + "\n  ".join(findings + lint["errors"]))
os.makedirs(dist, exist_ok=True)
# The index lists every archive in the folder: only this version's.
for stale in glob.glob(os.path.join(dist, "*.tgz")):
    os.remove(stale)
print(helm_python.package(chart_dir, destination=dist))
helm_python.registry.repo_index_generate(dist)
print(os.path.join(dist, "index.yaml"))
EOF

# The Dockerfile's build arguments: what `version` and the image's OCI labels report.
GIT_COMMIT="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
BUILD_DATE="$(date -u ${SOURCE_DATE_EPOCH:+-d "@$SOURCE_DATE_EPOCH"} +%Y-%m-%dT%H:%M:%SZ)"
IMAGE="${IMAGE_REPOSITORY:-gpucloud-operator}:$VERSION"
command=(docker build
  --build-arg "VERSION=$VERSION"
  --build-arg "GIT_COMMIT=$GIT_COMMIT"
  --build-arg "BUILD_DATE=$BUILD_DATE"
  --build-arg "SOURCE_URL=${SOURCE_URL:-}")
# Base images pinned by digest (docs/install.md, "Pinning the base images"), when set.
for base in BUILD_IMAGE BUILD_IMAGE_STATIC RUNTIME_IMAGE RUNTIME_IMAGE_STATIC; do
  if [ -n "${!base:-}" ]; then
    command+=(--build-arg "$base=${!base}")
  fi
done
command+=(-t "$IMAGE" .)
{
  echo "#!/bin/sh"
  echo "# Written by scripts/release.sh; run from the repository root."
  printf '%q ' "${command[@]}" | sed 's/ $//'
  echo
} >"$DIST/docker-build.sh"
chmod +x "$DIST/docker-build.sh"
echo "$DIST/docker-build.sh:"
tail -1 "$DIST/docker-build.sh"

# The SBOM: the crates the image's binary links (the production build, --no-default-features),
# for this machine's target. Dated by SOURCE_DATE_EPOCH or the commit, so it is reproducible.
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  SBOM_DATE="$BUILD_DATE"
else
  SBOM_DATE="$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)"
fi
SBOM="$DIST/gpucloud-operator.cdx.json"
cargo tree --locked -p gpucloud-operator --no-default-features -e normal,build \
  --prefix depth --format '{p}|{l}' \
  | TZ=UTC "$PYTHON" scripts/sbom.py Cargo.lock "$SBOM_DATE" >"$SBOM.tmp"
mv "$SBOM.tmp" "$SBOM"
echo "$SBOM"

# Checksums of every artifact, for `sha256sum --check` after a download.
(cd "$DIST" && sha256sum -- *.tgz index.yaml docker-build.sh gpucloud-operator.cdx.json >SHA256SUMS)
echo "$DIST/SHA256SUMS"

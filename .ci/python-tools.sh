#!/usr/bin/env bash
# Python tools the deployment tests use (tests/deploy_chart.rs, tests/least_privilege.rs):
# helm-python-sdk renders and lints the Helm chart without a helm binary; kubernetes-validate
# checks rendered built-in objects against the Kubernetes OpenAPI schemas; prometheus-client's
# strict OpenMetrics parser reads the operator's /metrics (src/controller/tests/production.rs).
# Creates a virtualenv at target/python-tools (idempotent, quick when already present) and
# prints the interpreter's path.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_PYTHON_SDK_VERSION="0.2.2"
KUBERNETES_VALIDATE_VERSION="1.37.0"
PROMETHEUS_CLIENT_VERSION="0.26.0"
VENV="target/python-tools"
STAMP="$VENV/.installed-$HELM_PYTHON_SDK_VERSION-$KUBERNETES_VALIDATE_VERSION-$PROMETHEUS_CLIENT_VERSION"

if [ ! -f "$STAMP" ]; then
  rm -rf "$VENV"
  mkdir -p target
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "helm-python-sdk==$HELM_PYTHON_SDK_VERSION" \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
    "prometheus-client==$PROMETHEUS_CLIENT_VERSION" >&2
  # Fail here, not in the tests, when an install is incomplete.
  "$VENV/bin/python" -c 'import helm_python, kubernetes_validate, prometheus_client.openmetrics.parser' >&2
  touch "$STAMP"
fi
echo "$(pwd)/$VENV/bin/python"

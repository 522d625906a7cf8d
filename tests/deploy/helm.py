"""Runs one Helm action against a cluster for the Rust deployment tests: helm-python-sdk's
Helm library, what the helm binary runs.

Usage: helm.py KUBECONFIG NAMESPACE RELEASE ACTION [CHART VALUES_JSON]

ACTION is install (creating the namespace when missing), upgrade or uninstall; CHART is a
chart directory or a packaged .tgz. Prints Helm's result as JSON, the rendered manifest left
out. A failed action exits with status 1 and Helm's message on stderr.
"""

import json
import sys

import helm_python


def main() -> int:
    kubeconfig, namespace, release, action = sys.argv[1:5]
    config = helm_python.Config(kubeconfig_path=kubeconfig, namespace=namespace)
    try:
        if action == "uninstall":
            result = config.uninstall(release, timeout=60)
        else:
            chart, values = sys.argv[5], json.loads(sys.argv[6])
            if action == "install":
                result = config.install(
                    chart, release, values, namespace=namespace, create_namespace=True, timeout=60
                )
            else:
                result = config.upgrade(chart, release, values, namespace=namespace, timeout=60)
    except helm_python.errors.HelmError as error:
        print(f"helm {action}: {error}", file=sys.stderr)
        return 1
    result.pop("manifest", None)
    json.dump(result, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

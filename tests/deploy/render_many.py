"""Renders the Helm chart with many sets of values in one process, for the Rust tests that
compare renderings (tests/deploy_chart.rs: every value the schema accepts changes what is
rendered).

Usage: render_many.py CHART RELEASE NAMESPACE < VALUES_LIST_JSON

Prints a JSON list, one entry per set of values: {"rendered": {template path: text}} (NOTES.txt
and the CRDs included), or {"error": message} when the values schema or a template refuses them.
"""

import json
import sys

import helm_python


def main() -> int:
    chart_path, release, namespace = sys.argv[1:4]
    chart = helm_python.Chart.load(chart_path)
    results = []
    for values in json.load(sys.stdin):
        try:
            chart.validate_schema(values)
            rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
            results.append({"rendered": dict(rendered)})
        except helm_python.errors.HelmError as error:
            results.append({"error": str(error)})
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

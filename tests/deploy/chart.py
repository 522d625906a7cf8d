"""Renders, lints and validates the Helm chart for the Rust deployment tests.

Usage: chart.py CHART VALUES_JSON RELEASE NAMESPACE

CHART is the chart's directory or a packaged .tgz. Prints one JSON document: {"crds": [yaml
text], "manifests": [yaml text], "metadata": Chart.yaml, "lint": report, "invalid":
[messages]}: "crds" is the output of templates/crds.yaml, "manifests" every other template's.
"invalid" lists schema violations of the rendered built-in objects (kubernetes-validate,
strict, Kubernetes 1.33); custom resources (the project's own GpuPolicy, other projects' such
as the ServiceMonitor) are left to the embedded API server. Values the chart's
values.schema.json rejects exit with status 2 and the message on stderr.
"""

import json
import sys

import helm_python
import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.33"


def main() -> int:
    chart_path, values_json, release, namespace = sys.argv[1:5]
    values = json.loads(values_json)
    if chart_path.endswith(".tgz"):
        with open(chart_path, "rb") as archive:
            chart = helm_python.Chart.load_archive(archive.read())
    else:
        chart = helm_python.Chart.load(chart_path)
    try:
        chart.validate_schema(values)
    except helm_python.errors.HelmValuesError as error:
        print(str(error), file=sys.stderr)
        return 2
    rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    crds_template = f"{chart.name}/templates/crds.yaml"
    crds = [text for path, text in rendered.items() if path == crds_template and text.strip()]
    manifests = [
        text
        for path, text in sorted(rendered.items())
        if path != crds_template and not path.endswith("NOTES.txt") and text.strip()
    ]
    invalid = []
    for text in manifests:
        for document in yaml.safe_load_all(text):
            if not document:
                continue
            if document.get("apiVersion", "").startswith(("monitoring.coreos.com/", "gpucloud.io/")):
                continue
            try:
                kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                name = document.get("metadata", {}).get("name")
                invalid.append(f"{document.get('kind')} {name}: {error.message}")
    lint = helm_python.lint(chart_path, values, strict=True, namespace=namespace)
    json.dump(
        {
            "crds": crds,
            "metadata": chart.metadata,
            "manifests": manifests,
            "lint": lint,
            "invalid": invalid,
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

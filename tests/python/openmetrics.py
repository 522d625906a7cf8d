"""Parses a /metrics body with prometheus-client's strict OpenMetrics parser.

Usage: openmetrics.py FILE

Prints one JSON object: each family's name -> {"type": ..., "samples": [sample names],
"labels": [label names]}. A body the parser refuses exits with status 1 and its message on
stderr.
"""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as body:
        text = body.read()
    families = {}
    try:
        for family in text_string_to_metric_families(text):
            families[family.name] = {
                "type": family.type,
                "samples": sorted({s.name for s in family.samples}),
                "labels": sorted({label for s in family.samples for label in s.labels}),
            }
    except ValueError as error:
        print(f"not OpenMetrics: {error}", file=sys.stderr)
        return 1
    json.dump(families, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

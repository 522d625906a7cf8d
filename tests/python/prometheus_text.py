"""Parses a /metrics body in the Prometheus text format 0.0.4, strictly.

Usage: prometheus_text.py FILE

prometheus-client's text parser is lenient (a sample whose name does not fit its family's TYPE
becomes an untyped family of its own), so the structure is checked first, as Prometheus' own
parser reads it: no OpenMetrics-only lines (`# EOF`, `# UNIT`), one HELP and one TYPE per
family, before its samples, naming the family's samples as they are written (a counter's TYPE
names `..._total`); each sample belongs to the family last typed (a histogram's
`_bucket`/`_sum`/`_count`, every bucket with `le`); every value a float.

Prints the same JSON as openmetrics.py: each family's name (a counter's without `_total`, as
prometheus-client names it) -> {"type", "samples", "labels"}. A body that breaks a rule exits
with status 1 and the rule on stderr.
"""

import json
import math
import re
import sys

from prometheus_client.parser import text_string_to_metric_families

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(rf"^({NAME})(\{{.*\}})? (\S+)$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def check(text: str) -> None:
    typed = {}
    helped = set()
    family, kind = None, None
    for number, line in enumerate(text.split("\n"), 1):
        where = f"line {number}: {line!r}"
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 2 and parts[1] in ("EOF", "UNIT"):
                raise ValueError(f"{where}: OpenMetrics only")
            if len(parts) >= 3 and parts[1] == "HELP":
                if parts[2] in helped:
                    raise ValueError(f"{where}: second HELP")
                helped.add(parts[2])
            elif len(parts) >= 4 and parts[1] == "TYPE":
                if parts[3] not in TYPES:
                    raise ValueError(f"{where}: type {parts[3]}")
                if parts[2] in typed:
                    raise ValueError(f"{where}: second TYPE")
                family, kind = parts[2], parts[3]
                typed[family] = kind
            continue
        match = SAMPLE.match(line)
        if not match:
            raise ValueError(f"{where}: not a sample")
        name, labels, value = match.groups()
        try:
            float(value.replace("Inf", "inf"))
        except ValueError:
            raise ValueError(f"{where}: value {value}") from None
        if kind == "histogram":
            allowed = {family + "_bucket", family + "_sum", family + "_count"}
            if name == family + "_bucket" and 'le="' not in (labels or ""):
                raise ValueError(f"{where}: a bucket without le")
        elif kind == "summary":
            allowed = {family, family + "_sum", family + "_count"}
        else:
            allowed = {family}
        if name not in allowed:
            raise ValueError(f"{where}: not a sample of {family} ({kind})")
    if not typed:
        raise ValueError("no family")


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as body:
        text = body.read()
    families = {}
    try:
        check(text)
        for family in text_string_to_metric_families(text):
            families[family.name] = {
                "type": family.type,
                "samples": sorted({s.name for s in family.samples}),
                "labels": sorted({label for s in family.samples for label in s.labels}),
            }
            if any(math.isnan(s.value) for s in family.samples if family.type == "counter"):
                raise ValueError(f"{family.name}: a NaN counter")
    except ValueError as error:
        print(f"not the Prometheus text format 0.0.4: {error}", file=sys.stderr)
        return 1
    json.dump(families, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

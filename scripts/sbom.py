"""Writes the CycloneDX 1.5 SBOM (JSON) of the operator binary's crates.

Usage: cargo tree -p gpucloud-operator --no-default-features -e normal,build --prefix depth \
         --format '{p}|{l}' --locked | sbom.py CARGO_LOCK TIMESTAMP > SBOM

The crates are those the production build links (`--no-default-features`, as the Dockerfile
builds it: no sandbox), with the features resolved for that build alone, for the build
machine's target. Each crates.io crate carries its purl, its licence expression and the
SHA-256 checksum Cargo.lock pins it by; a workspace crate its purl and licence. The
`dependencies` section is the crate graph. Nothing is random: the serial number is derived
from the component list, and TIMESTAMP (ISO 8601) comes from the caller, so two runs on one
commit write the same file.
"""

import json
import re
import sys
import tomllib
import uuid

LINE = re.compile(r"^(\d+)(\S+) v(\S+)(?: \(([^)]*)\))?(?: \(\*\))?\|(.*)$")


def main() -> int:
    lock_path, timestamp = sys.argv[1:3]
    with open(lock_path, "rb") as lock:
        checksums = {
            (p["name"], p["version"]): p.get("checksum")
            for p in tomllib.load(lock).get("package", [])
        }
    components = {}
    edges = {}
    stack = []
    root = None
    for raw in sys.stdin.read().splitlines():
        match = LINE.match(raw.strip())
        if not match:
            raise SystemExit(f"sbom.py: unexpected cargo tree line {raw!r}")
        depth, name, version, source, licence = match.groups()
        depth = int(depth)
        ref = f"pkg:cargo/{name}@{version}"
        if ref not in components:
            component = {"type": "library", "bom-ref": ref, "name": name, "version": version,
                         "purl": ref}
            if licence:
                component["licenses"] = [{"expression": licence}]
            checksum = checksums.get((name, version))
            if checksum:
                component["hashes"] = [{"alg": "SHA-256", "content": checksum}]
            elif source and source.startswith("/"):
                component["properties"] = [{"name": "cargo:source", "value": "workspace"}]
            components[ref] = component
            edges.setdefault(ref, set())
        del stack[depth:]
        if stack:
            edges[stack[-1]].add(ref)
        else:
            root = ref
        stack.append(ref)
    if root is None:
        raise SystemExit("sbom.py: no crates on standard input")
    main_component = dict(components.pop(root), type="application")
    serial = uuid.uuid5(uuid.NAMESPACE_URL, root + "|" + "|".join(sorted(components)))
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": timestamp,
            "tools": {"components": [{"type": "application", "name": "scripts/sbom.py"}]},
            "component": main_component,
        },
        "components": sorted(components.values(), key=lambda c: c["bom-ref"]),
        "dependencies": [
            {"ref": ref, "dependsOn": sorted(children)} for ref, children in sorted(edges.items())
        ],
    }
    json.dump(bom, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write the LeaderWorkerSet v1 schema that ``servopt export --format kubernetes --check`` validates against.

The schema is the ``openAPIV3Schema`` of the LeaderWorkerSet CustomResourceDefinition that
kubernetes-sigs/lws publishes (Apache-2.0), with its ``description`` texts dropped (they do not
constrain anything) and its source recorded under ``x-servopt-source``. Run it on the CRD of the
release the manifests target:

    git --git-dir=LWS.git show v0.10.0:config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml > crd.yaml
    python scripts/build_lws_schema.py crd.yaml --source "kubernetes-sigs/lws@v0.10.0 (2161f38): config/crd/bases/..."
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "results" / "data" / "leaderworkerset_v1.schema.json.gz"


def without_descriptions(node):
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crd", type=Path, help="the LeaderWorkerSet CRD YAML file")
    parser.add_argument("--source", required=True, help="where the CRD came from (repository@tag (commit): path)")
    args = parser.parse_args()
    crd = yaml.safe_load(args.crd.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = without_descriptions(version["schema"]["openAPIV3Schema"])
    schema["x-servopt-source"] = args.source
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    OUT.write_bytes(gzip.compress(text.encode(), mtime=0))
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

"""Write ``optimizer/reports/schemas/trainjob-v1alpha1.json`` from Kubeflow Trainer's TrainJob CRD.

The vendored file is the CRD's ``v1alpha1`` ``openAPIV3Schema`` as published, plus an
``x-cloudopt-source`` object naming where it came from (repository, tag, path, the CRD file's
sha256), so the schema the tests check TrainJobs against can be regenerated and compared::

    git --git-dir=<trainer>.git show v2.2.1:manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml > crd.yaml
    python optimizer/reports/schemas/vendor_trainjob_schema.py crd.yaml --tag v2.2.1

Needs PyYAML (a dev dependency); cloudopt reads only the JSON it writes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import yaml

REPOSITORY = "https://github.com/kubeflow/trainer"
CRD_PATH = "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"
OUT = Path(__file__).resolve().parents[1] / "optimizer/reports/schemas/trainjob-v1alpha1.json"


def vendored_schema(crd_file: Path, tag: str, path: str = CRD_PATH,
                    version: str = "v1alpha1") -> dict:
    """The ``version``'s ``openAPIV3Schema`` of the CRD in ``crd_file``, with its source."""
    raw = crd_file.read_bytes()
    crd = yaml.safe_load(raw)
    if crd.get("kind") != "CustomResourceDefinition" or crd["spec"]["names"]["kind"] != "TrainJob":
        raise SystemExit(f"{crd_file} is not the TrainJob CustomResourceDefinition")
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    if version not in versions:
        raise SystemExit(f"{crd_file} has no version {version} (it has {sorted(versions)})")
    source = {"repository": REPOSITORY, "tag": tag, "path": path,
              "sha256": hashlib.sha256(raw).hexdigest(),
              "group": crd["spec"]["group"], "version": version}
    return {"x-cloudopt-source": source, **versions[version]["schema"]["openAPIV3Schema"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crd", type=Path, help="the TrainJob CRD YAML file")
    parser.add_argument("--tag", required=True, help="the release tag it was taken from")
    parser.add_argument("--path", default=CRD_PATH, help="its path in the repository")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    schema = vendored_schema(args.crd, args.tag, args.path)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(schema, indent=1) + "\n")
    print(f"wrote {args.out} ({args.tag}, sha256 {schema['x-cloudopt-source']['sha256'][:12]})")


if __name__ == "__main__":
    main()

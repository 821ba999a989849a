"""The TrainJob written for a data-parallel recommendation: valid against Kubeflow Trainer's
published TrainJob CRD (vendored, with its source), carrying the single-pod Job's restricted pod
settings through ``runtimePatches``, with each node the allocation's even share."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from conftest import need
from test_k8s_restricted import restricted_violations

from optimizer.foundation.allocation import Allocation
from optimizer.reports.k8s_security import image_tag
from optimizer.reports.k8s_trainjob import (
    NODE,
    SCHEMA_FILE,
    k8s_trainjob_yaml,
    node_share,
    trainjob_object,
    validate_trainjob,
)

yaml = need("yaml")
need("jsonschema")

ENV = {"OMP_NUM_THREADS": "4", "OPTIMIZER_BATCH_SIZE": "64"}
SHAPES = [(2, 0), (4, 0), (2, 2), (4, 4), (4, 8)]
"""(replicas, GPUs of the whole job)."""


def _alloc(replicas: int, gpus: int = 0, cpus: int = 8, memory_gb: float = 16.0) -> Allocation:
    return Allocation(gpus=gpus, cpus=cpus, memory_gb=memory_gb, batch_size=64,
                      replicas=replicas)


def _yaml(replicas: int, gpus: int, **kw) -> str:
    return k8s_trainjob_yaml(_alloc(replicas, gpus), ENV, name="ResNet_run",
                             command=["torchrun", "train.py"], args=["--bs", "64"],
                             comment="cloudopt", **kw)


def _pod(obj: dict) -> tuple[dict, dict]:
    """(metadata, pod spec) of a node as the runtime makes it: the torch-distributed
    runtime's ``node`` container (image, command from the trainer) with the patch merged."""
    (patch,) = obj["spec"]["runtimePatches"]
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert job["name"] == NODE
    template = job["template"]["spec"]["template"]
    spec = copy.deepcopy(template["spec"])
    trainer = obj["spec"]["trainer"]
    (container,) = spec["containers"]
    assert container["name"] == NODE
    container.update(image=trainer["image"], env=trainer["env"], command=trainer["command"])
    return template.get("metadata") or {}, spec


@pytest.mark.parametrize("replicas,gpus", SHAPES)
def test_the_trainjob_passes_the_published_schema(replicas, gpus):
    text = _yaml(replicas, gpus, sla_time_s=3600 if gpus else None)
    (obj,) = [d for d in yaml.safe_load_all(text) if d]
    assert validate_trainjob(obj) == []
    assert obj == trainjob_object(_alloc(replicas, gpus), ENV, name="ResNet_run",
                                  command=["torchrun", "train.py"], args=["--bs", "64"],
                                  sla_time_s=3600 if gpus else None)
    assert obj["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                         "kind": "ClusterTrainingRuntime",
                                         "name": "torch-distributed"}
    trainer = obj["spec"]["trainer"]
    assert trainer["numNodes"] == replicas and trainer["numProcPerNode"] == 1
    assert trainer["command"][0] == "torchrun"
    assert obj["spec"]["activeDeadlineSeconds"] > 0
    header = text.split("apiVersion")[0]
    assert f"{replicas} nodes x 1 torchrun worker" in header
    assert "kubectl apply -f trainjob.yaml" in header and "Not carried" in header


@pytest.mark.parametrize("break_it,path", [
    (lambda o: o["spec"]["trainer"].update(numNodes="two"), "spec.trainer.numNodes"),
    (lambda o: o["spec"]["runtimeRef"].pop("name"), "spec.runtimeRef"),
    (lambda o: o["spec"].pop("runtimeRef"), "spec"),
    (lambda o: o["spec"]["trainer"]["resourcesPerNode"]["limits"].update(cpu="4 cores"),
     "spec.trainer.resourcesPerNode.limits.cpu"),
    (lambda o: o["spec"]["trainer"].update(numNode=2), "spec.trainer"),  # a typo: not pruned
    (lambda o: o["spec"]["trainer"].update(numNodes=2**31), "spec.trainer.numNodes"),
    (lambda o: o["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
     ["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"][0]
     .update(emptyDir={"sizeLimit": "lots"}),
     "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template"
     ".spec.template.spec.volumes[0].emptyDir.sizeLimit"),
])
def test_a_broken_trainjob_is_refused_naming_the_path(break_it, path):
    obj = trainjob_object(_alloc(2), ENV, name="x")
    break_it(obj)
    errors = validate_trainjob(obj)
    assert errors and any(e.startswith(path + ": ") for e in errors), errors
    if path == "spec.runtimeRef":
        assert "'name'" in " ".join(errors)


def test_not_a_trainjob_is_refused():
    obj = trainjob_object(_alloc(2), ENV, name="x")
    assert validate_trainjob({**obj, "kind": "Job"}) == ["(root): not a "
                                                         "trainer.kubeflow.org/v1alpha1 TrainJob"]
    assert validate_trainjob({**obj, "metadata": {}})[0].startswith("metadata.name:")


@pytest.mark.parametrize("replicas,gpus", SHAPES)
def test_every_node_passes_the_restricted_profile(replicas, gpus):
    image = "registry.example.com/team/train:2.1" if gpus else None
    obj = trainjob_object(_alloc(replicas, gpus), ENV, name="ResNet_run", image=image,
                          namespace="ml" if gpus else None)
    metadata, spec = _pod(obj)
    assert restricted_violations(spec, metadata) == []
    (c,) = spec["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert image_tag(c["image"]) not in (None, "latest")
    assert all(v["emptyDir"].get("sizeLimit") for v in spec["volumes"])
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp", "/home/cloudopt"}
    assert {m["name"] for m in c["volumeMounts"]} == {v["name"] for v in spec["volumes"]}
    assert {"name": "HOME", "value": "/home/cloudopt"} in c["env"]
    # the checker is not vacuous on this shape either
    broken = copy.deepcopy(spec)
    broken["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    assert restricted_violations(broken, metadata)


def test_the_vendored_schema_names_its_source():
    schema = json.loads(SCHEMA_FILE.read_text())
    source = schema["x-cloudopt-source"]
    assert source["repository"] == "https://github.com/kubeflow/trainer"
    assert re.fullmatch(r"v2\.2\.\d+", source["tag"])
    assert source["path"] == "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"
    assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"])
    assert source["version"] == "v1alpha1"
    assert "runtimeRef" in schema["properties"]["spec"]["properties"]


def test_the_generator_writes_the_schema_and_its_source(tmp_path):
    tool = Path(__file__).resolve().parents[1] / "optimizer" / "reports" / "schemas" / "vendor_trainjob_schema.py"
    spec = importlib.util.spec_from_file_location("vendor_trainjob_schema", tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    body = {"type": "object", "properties": {"spec": {"type": "object"}}}
    crd = tmp_path / "crd.yaml"
    crd.write_text(yaml.safe_dump({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "spec": {"group": "trainer.kubeflow.org", "names": {"kind": "TrainJob"},
                 "versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": body}}]}}))
    out = tmp_path / "out.json"
    module.main([str(crd), "--tag", "v2.2.9", "--out", str(out)])
    written = json.loads(out.read_text())
    assert written["x-cloudopt-source"]["tag"] == "v2.2.9"
    assert written["x-cloudopt-source"]["sha256"] == hashlib.sha256(crd.read_bytes()).hexdigest()
    assert {k: v for k, v in written.items() if k != "x-cloudopt-source"} == body


def test_each_node_gets_the_allocations_share():
    resources = trainjob_object(_alloc(2, cpus=8, memory_gb=16.0), ENV,
                                name="x")["spec"]["trainer"]["resourcesPerNode"]
    assert resources == {"requests": {"cpu": "4", "memory": "8Gi"},
                         "limits": {"cpu": "4", "memory": "8Gi"}}
    gpu = trainjob_object(_alloc(4, gpus=8, cpus=16, memory_gb=50.0), ENV,
                          name="x")["spec"]["trainer"]["resourcesPerNode"]
    assert gpu["limits"] == {"cpu": "4", "memory": "12800Mi", "nvidia.com/gpu": "2"}
    assert "nvidia.com/gpu" not in gpu["requests"]  # extended resources: limits only
    odd = trainjob_object(_alloc(2, cpus=3, memory_gb=3.0), ENV, name="x")
    assert odd["spec"]["trainer"]["resourcesPerNode"]["limits"]["cpu"] == "1500m"
    assert validate_trainjob(odd) == []
    share = node_share(_alloc(4, gpus=4, cpus=16, memory_gb=32.0))
    assert (share.gpus, share.cpus, share.memory_gb, share.replicas) == (1, 4, 8, 1)
    with pytest.raises(ValueError, match="split evenly"):
        node_share(_alloc(4, gpus=2))


def test_torchruns_own_variables_are_refused():
    with pytest.raises(ValueError, match="PET_NNODES"):
        trainjob_object(_alloc(2), {**ENV, "PET_NNODES": "2"}, name="x")


def test_a_missing_jsonschema_is_said_plainly(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    with pytest.raises(ImportError, match="needs jsonschema"):
        validate_trainjob(trainjob_object(_alloc(2), ENV, name="x"))

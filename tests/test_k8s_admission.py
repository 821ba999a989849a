"""What cloudopt hands a platform runs as recommended and can do no more (issue 73).

Every object written for the demo (``examples/train_mlp.py``), the DDP example
(``examples/train_ddp.py --launcher torchrun --workers-max 2``, with and without DataLoader
workers) and a live plan passes the Kubernetes 1.35 schema, the restricted Pod Security
Standard, and the admission rules its controller enforces: Kubeflow Trainer v2.2's webhook
for the TrainJob (each rule also refusing a TrainJob that breaks it), the live plan's own
admission policies for a resize (a table of crafted requests), the VPA's clamp. The outputs
come from the same writer the main job uses (:func:`write_cluster_outputs`), fed the shapes
those runs recommend, so no training run is needed here.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest
from conftest import need
from k8s_admission import decide, resized
from test_k8s_restricted import pod_templates, restricted_violations
from test_k8s_trainjob import _pod as trainjob_pod

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.memory import memory_quantity, right_size_memory
from optimizer.reports.cluster import JobShape, trainjob_admission_errors, write_cluster_outputs
from optimizer.reports.cluster.trainer_rules import domain_prefixed_path
from optimizer.reports.k8s import dns_label
from optimizer.reports.k8s_access import POD_NAME_EXTRA, service_account_name
from optimizer.reports.k8s_resize import (
    k8s_live_job_yaml,
    k8s_live_rbac_yaml,
    live_limits,
    phase_requests,
    resize_bounds,
)
from optimizer.reports.k8s_trainjob import PATCH_MANAGER, validate_trainjob
from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry
from optimizer.trials.live.pod_spec import parse_quantity

yaml = need("yaml")
ROOT = Path(__file__).resolve().parent.parent
K8S = "1.35.0"
RUN = "20261128-130501-train_ddp"
"""A run folder's name: it starts with a digit, which the TrainJob CRD refuses as it is."""
ENV = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": ""}
SHAPES = {
    "demo": JobShape(Allocation(cpus=2, memory_gb=1.25, batch_size=256), dict(ENV),
                     name="20261128-120000-train_mlp", script=str(ROOT / "examples/train_mlp.py"),
                     args=["--batch-size", "256"], memory_bounds_gb=(1.0, 2.0),
                     cpu_bounds=(1.6, 4), predicted_time_s=120.0),
    "ddp": JobShape(Allocation(cpus=2, memory_gb=2.0, batch_size=64, replicas=2), dict(ENV),
                    name=RUN, script=str(ROOT / "examples/train_ddp.py"),
                    args=["--batch-size", "64"], launcher="torchrun",
                    rank_peaks_gb=[0.9, 0.6], memory_bounds_gb=(1.5, 2.5), cpu_bounds=(1.8, 4)),
    "ddp-loader": JobShape(Allocation(cpus=4, memory_gb=4.0, replicas=2, workers=2), dict(ENV),
                           name=RUN + "-w", script=str(ROOT / "examples/train_ddp.py"),
                           launcher="torchrun", loader_workers=2, workers_flag="--workers",
                           memory_bounds_gb=(3.0, 5.0), cpu_bounds=(3.0, 4)),
}
PLAN = LivePlan({"startup": PhaseEntry(PhaseAllocation(1, 0.5), share=0.2),
                 "train": PhaseEntry(PhaseAllocation(4, 2.0), share=0.7),
                 "eval": PhaseEntry(PhaseAllocation(2, 1.0), share=0.1)},
                PhaseAllocation(2, 1.0), schedule=["startup", "train", "eval", "train"],
                memory_max_gb=2.0, static={"gpus": 0, "batch_size": 64}, source="reinforce")
LIVE = "20261128-140000-checkpoint_heavy"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, dict[str, Path]]:
    out = {}
    for key, shape in SHAPES.items():
        folder = tmp_path_factory.mktemp(key)
        out[key] = write_cluster_outputs(folder, shape)
    folder = tmp_path_factory.mktemp("live")
    (folder / "k8s-live-job.yaml").write_text(k8s_live_job_yaml(
        PLAN, ENV, name=LIVE, command=["python", "train.py"], shm=True))
    (folder / "k8s-live-rbac.yaml").write_text(k8s_live_rbac_yaml(LIVE, PLAN))
    out["live"] = {"k8s_live_job": folder / "k8s-live-job.yaml",
                   "k8s_live_rbac": folder / "k8s-live-rbac.yaml"}
    return out


def _objects(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all(outputs) -> list[tuple[str, dict]]:
    return [(f"{key}/{path.name}", obj) for key, paths in outputs.items()
            for path in paths.values() if path.suffix == ".yaml" for obj in _objects(path)]


# --- every object: schema, profile, admission --------------------------------------------


def test_what_each_run_writes(outputs):
    assert set(outputs["demo"]) == {"k8s_job"}
    assert set(outputs["ddp"]) == {"k8s_job", "trainjob", "ray_train_job"}


def test_every_object_passes_its_schema_and_its_admission_rules(outputs):
    kv = need("kubernetes_validate")
    kinds = {}
    for where, obj in _all(outputs):
        kinds[obj["kind"]] = kinds.get(obj["kind"], 0) + 1
        name = obj["metadata"]["name"]
        if obj["kind"] == "TrainJob":
            assert validate_trainjob(obj) == [], where
            assert trainjob_admission_errors(obj) == [], where
        elif obj["apiVersion"].startswith("autoscaling.k8s.io/"):
            _check_vpa(obj)
        else:
            kv.validate(obj, K8S, strict=True)
        # Names: RFC 1035 labels for what is named after the run (a letter first).
        if obj["kind"] not in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            assert name[0].isalpha() and len(name) <= 63 and name == name.lower(), (where, name)
    assert kinds == {"Job": 4, "VerticalPodAutoscaler": 3, "TrainJob": 2, "ConfigMap": 2,
                     "ServiceAccount": 1, "Role": 1, "RoleBinding": 1,
                     "ValidatingAdmissionPolicy": 2, "ValidatingAdmissionPolicyBinding": 2}


def test_every_pod_passes_the_restricted_profile(outputs):
    pods = 0
    for where, obj in _all(outputs):
        if obj["kind"] == "TrainJob":
            metadata, spec = trainjob_pod(obj)
        elif pod_templates(obj):
            ((metadata, spec),) = pod_templates(obj)
        else:
            continue
        assert restricted_violations(spec, metadata) == [], where
        pods += 1
    assert pods == 6


VPA_FIELDS = {"containerName", "mode", "minAllowed", "maxAllowed", "controlledResources",
              "controlledValues"}


def _check_vpa(vpa: dict) -> None:
    """The VPA CRD's documented fields (autoscaler's vertical-pod-autoscaler/docs/api.md)."""
    assert vpa["apiVersion"] == "autoscaling.k8s.io/v1"
    assert set(vpa["spec"]) == {"targetRef", "updatePolicy", "resourcePolicy"}
    assert vpa["spec"]["updatePolicy"]["updateMode"] == "Initial"
    for policy in vpa["spec"]["resourcePolicy"]["containerPolicies"]:
        assert set(policy) <= VPA_FIELDS
        assert policy["controlledValues"] in ("RequestsAndLimits", "RequestsOnly")
        for key in ("minAllowed", "maxAllowed"):
            assert set(policy[key]) == {"cpu", "memory"}
            assert all(parse_quantity(q) > 0 for q in policy[key].values())


# --- a data-parallel pick, written consistently -------------------------------------------


def test_a_data_parallel_pick_runs_its_measured_workers_everywhere(outputs):
    paths, alloc = outputs["ddp"], SHAPES["ddp"].allocation
    job, vpa = _objects(paths["k8s_job"])
    (container,) = job["spec"]["template"]["spec"]["containers"]
    # The Job runs the ranks under torchrun, as the trials did: never a bare python.
    assert container["command"] == ["torchrun", "--standalone", "--nproc-per-node=2",
                                     "--max-restarts=0", "train_ddp.py"]
    assert container["args"] == ["--batch-size", "64"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["OMP_NUM_THREADS"] == "1"  # each rank its share of the 2 cores
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}
    (trainjob,) = _objects(paths["trainjob"])
    trainer = trainjob["spec"]["trainer"]
    assert trainer["numNodes"] == alloc.replicas and trainer["numProcPerNode"] == 1
    assert trainer["command"] == ["torchrun", "train_ddp.py"]
    assert trainer["args"] == container["args"]
    assert trainjob["spec"]["runtimePatches"][0]["manager"] == PATCH_MANAGER
    ray_job = paths["ray_train_job"].read_text()
    consts = {t.id: ast.literal_eval(n.value) for n in ast.parse(ray_job).body
              if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert consts["NUM_WORKERS"] == alloc.replicas and consts["USE_GPU"] is False
    assert consts["RESOURCES_PER_WORKER"]["CPU"] == 1.0
    assert consts["ARGS"] == ["--batch-size", "64"]
    assert Path(consts["SCRIPT"]) == ROOT / "examples/train_ddp.py"
    # The demo's single process stays plain python.
    (demo_job, _) = _objects(outputs["demo"]["k8s_job"])
    assert demo_job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "python", "train_mlp.py"]


def test_each_node_gets_its_ranks_memory_rank_0_apart(outputs):
    (trainjob,) = _objects(outputs["ddp"]["trainjob"])
    res = trainjob["spec"]["trainer"]["resourcesPerNode"]
    # rank 0 peaked at 0.9 GB, rank 1 at 0.6: rank 1's need requested, rank 0's the limit
    assert res["requests"]["memory"] == memory_quantity(right_size_memory(0.6))
    assert res["limits"]["memory"] == memory_quantity(right_size_memory(0.9))
    assert parse_quantity(res["limits"]["memory"]) > parse_quantity(res["requests"]["memory"])
    ray_job = outputs["ddp"]["ray_train_job"].read_text()
    assert f"'memory': {int(right_size_memory(0.9) * 2**30)}" in ray_job
    # Without per-rank records: the even share, limit = request.
    (even,) = _objects(outputs["ddp-loader"]["trainjob"])
    res = even["spec"]["trainer"]["resourcesPerNode"]
    assert res["requests"]["memory"] == res["limits"]["memory"] == "2Gi"


def _shm(spec: dict, container: dict) -> dict | None:
    mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
    if not mounts:
        return None
    (volume,) = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]]
    return volume["emptyDir"]


def test_dataloader_workers_get_a_bounded_shared_memory(outputs):
    job, _ = _objects(outputs["ddp-loader"]["k8s_job"])
    spec = job["spec"]["template"]["spec"]
    assert _shm(spec, spec["containers"][0]) == {"medium": "Memory", "sizeLimit": "1024Mi"}
    (trainjob,) = _objects(outputs["ddp-loader"]["trainjob"])
    _, node = trainjob_pod(trainjob)
    assert _shm(node, node["containers"][0]) == {"medium": "Memory", "sizeLimit": "512Mi"}
    live = _objects(outputs["live"]["k8s_live_job"])[1]["spec"]["template"]["spec"]
    assert _shm(live, live["containers"][0])["medium"] == "Memory"
    # No workers known: no /dev/shm volume at all.
    for key in ("demo", "ddp"):
        job, _ = _objects(outputs[key]["k8s_job"])
        spec = job["spec"]["template"]["spec"]
        assert _shm(spec, spec["containers"][0]) is None


# --- Kubeflow Trainer's webhook, rule by rule ---------------------------------------------


def _trainjob(outputs) -> dict:
    (obj,) = _objects(outputs["ddp"]["trainjob"])
    assert trainjob_admission_errors(obj) == []
    return obj


def _patch_pod(obj: dict) -> dict:
    job = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return job["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


BREAKS = {
    "manager not domain-prefixed": (lambda o: o["spec"]["runtimePatches"][0].update(
        manager="cloudopt"), "manager"),
    "manager's domain not a subdomain": (lambda o: o["spec"]["runtimePatches"][0].update(
        manager="Cloud_Opt/x"), "manager"),
    "manager with an empty path": (lambda o: o["spec"]["runtimePatches"][0].update(
        manager="cloudopt.io/"), "manager"),
    "name starting with a digit": (lambda o: o["metadata"].update(name="2026-run"),
                                   "RFC 1035"),
    "name over 63": (lambda o: o["metadata"].update(name="a" * 64), "63"),
    "unknown runtime": (lambda o: o["spec"]["runtimeRef"].update(name="mpi-distributed"),
                        "unsupported runtime"),
    "reserved torchrun env": (lambda o: o["spec"]["trainer"]["env"].append(
        {"name": "PET_NNODES", "value": "4"}), "reserved"),
    "patch of a job the runtime lacks": (
        lambda o: o["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
            "replicatedJobs"][0].update(name="launcher"), "not in the runtime"),
    "patch of a container the runtime lacks": (
        lambda o: _patch_pod(o)["containers"][0].update(name="sidecar"), "not in the runtime"),
    "env on the node container in a patch": (
        lambda o: _patch_pod(o)["containers"][0].update(env=[{"name": "A", "value": "1"}]),
        "env"),
    "two patches of one manager": (lambda o: o["spec"]["runtimePatches"].append(
        copy.deepcopy(o["spec"]["runtimePatches"][0])), "duplicate"),
}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_trainers_webhook_refuses_a_trainjob_breaking_one_rule(outputs, rule):
    obj = copy.deepcopy(_trainjob(outputs))
    breaks, said = BREAKS[rule]
    breaks(obj)
    errors = trainjob_admission_errors(obj)
    assert errors and any(said in e for e in errors), errors


def test_a_domain_prefixed_path_is_what_apimachinery_accepts():
    for ok in (PATCH_MANAGER, "kueue.x-k8s.io/manager", "example.com/name/sub"):
        assert domain_prefixed_path(ok) == [], ok
    for bad in ("", "cloudopt", "/x", "a..b/x", "-a.io/x", "a.io/x y"):
        assert domain_prefixed_path(bad), bad


def test_a_run_name_starting_with_a_digit_gets_a_letter():
    assert dns_label("20261128-130501-train_ddp") == "run-20261128-130501-train-ddp"
    assert dns_label("ResNet_run") == "resnet-run"
    assert dns_label("9" * 80).startswith("run-") and len(dns_label("9" * 80)) == 63


# --- the live plan's resize, bounded to the plan -------------------------------------------

CONTAINER = dns_label(LIVE)
ACCOUNT = service_account_name(LIVE)
POD = "checkpoint-heavy-x7k2p"


def _rbac(namespace: str | None = None, plan: LivePlan = PLAN) -> tuple[list[dict], dict]:
    objects = [d for d in yaml.safe_load_all(k8s_live_rbac_yaml(LIVE, plan,
                                                                namespace=namespace)) if d]
    policies = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    (params,) = [o for o in objects if o["kind"] == "ConfigMap"]
    return policies, params


def _old_pod(namespace: str = "ml") -> dict:
    configmap, job = yaml.safe_load_all(k8s_live_job_yaml(
        PLAN, ENV, name=LIVE, command=["python", "train.py"], shm=True))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": POD, "namespace": namespace},
            "spec": copy.deepcopy(job["spec"]["template"]["spec"])}


def _request(target: str = POD, token_pod: str | None = POD, namespace: str = "ml") -> dict:
    extra = {POD_NAME_EXTRA: [token_pod]} if token_pod else {}
    return {"name": target, "namespace": namespace, "operation": "UPDATE",
            "subResource": "resize",
            "userInfo": {"username": f"system:serviceaccount:{namespace}:{ACCOUNT}",
                         "extra": extra}}


def _verdict(new: dict, old: dict, request: dict, namespace: str | None = None,
             plan: LivePlan = PLAN) -> str:
    """The API server's answer: refused if any bound policy refuses; the bounds policy reads
    the ConfigMap of the request's namespace (none there: it does not judge)."""
    policies, params = _rbac(namespace, plan)
    answers = []
    for policy in policies:
        uses_params = "paramKind" in policy["spec"]
        answers.append(decide(policy, request, obj=new, old=old,
                              params=params if uses_params else None))
    return "refused" if "refused" in answers else "admitted"


def _sidecar(pod: dict, memory: str) -> dict:
    out = copy.deepcopy(pod)
    out["spec"]["initContainers"][0]["resources"]["requests"]["memory"] = memory
    out["spec"]["initContainers"][0]["resources"]["limits"]["memory"] = memory
    return out


def _table() -> list[tuple[str, dict, dict, str]]:
    """(what, request, new pod, expected) for resizes of the live job's pod from its start."""
    old = _old_pod()
    limits = live_limits(PLAN)
    rows = [(f"the plan's step to {phase}", _request(), resized(old, CONTAINER,
                                                              phase_requests(PLAN, phase)),
             "admitted") for phase in [*PLAN.phases, None]]
    rows += [
        ("the restore to the largest", _request(), resized(old, CONTAINER, {
            "cpu": f"{int(parse_quantity(limits['cpu']) * 1000) - 1}m",
            "memory": limits["memory"]}), "admitted"),
        ("a neighbour's pod", _request(target="db-0"),
         resized(old, CONTAINER, phase_requests(PLAN, "train")), "refused"),
        ("a token bound to no pod", _request(token_pod=None),
         resized(old, CONTAINER, phase_requests(PLAN, "train")), "refused"),
        ("own memory 512Mi -> 200Gi", _request(), resized(old, CONTAINER, {"memory": "200Gi"}),
         "refused"),
        ("own memory under the plan's smallest", _request(),
         resized(old, CONTAINER, {"memory": "256Mi"}), "refused"),
        ("own CPUs 1 -> 64", _request(), resized(old, CONTAINER, {"cpu": "64"}), "refused"),
        ("own CPUs under the plan's smallest", _request(),
         resized(old, CONTAINER, {"cpu": "500m"}), "refused"),
        ("the api-proxy sidecar 64Mi -> 50Gi", _request(), _sidecar(old, "50Gi"), "refused"),
        ("a limit the plan never changes", _request(),
         resized(old, CONTAINER, phase_requests(PLAN, "train"),
                 limits={**limits, "memory": "4Gi"}), "refused"),
        ("a resource the plan never asks", _request(),
         resized(old, CONTAINER, {"ephemeral-storage": "10Gi"}), "refused"),
    ]
    return rows


@pytest.mark.parametrize("row", range(len(PLAN.phases) + 11))
def test_the_crafted_request_table(row):
    what, request, new, expected = _table()[row]
    assert _verdict(new, _old_pod(), request) == expected, what


def test_the_bounds_are_the_plans_smallest_and_largest():
    assert resize_bounds(PLAN) == {"cpuMin": "1", "cpuMax": "4", "memoryMin": "512Mi",
                                   "memoryMax": "2Gi"}
    _, params = _rbac()
    assert params["data"] == resize_bounds(PLAN)


def test_two_namespaces_with_one_job_name_keep_their_own_bounds():
    """The cluster-scoped policies depend on the job's name only; each namespace's own
    ConfigMap holds its plan's bounds, so a smaller plan in ``dev`` is not widened by
    ``ml``'s, nor ``ml``'s narrowed by ``dev``'s."""
    small = LivePlan({"train": PhaseEntry(PhaseAllocation(2, 1.0), share=1.0)},
                     PhaseAllocation(1, 0.5), schedule=["train"], memory_max_gb=1.0,
                     static={"gpus": 0}, source="test")
    policies_ml, _ = _rbac(None, PLAN)
    policies_dev, _ = _rbac(None, small)
    assert [p["spec"] for p in policies_ml] == [p["spec"] for p in policies_dev]
    old = _old_pod("dev")
    four = resized(old, CONTAINER, phase_requests(PLAN, "train"))
    assert _verdict(four, old, _request(namespace="dev"), plan=small) == "refused"
    assert _verdict(four, _old_pod("ml"), _request(namespace="ml"), plan=PLAN) == "admitted"
    # Known namespaces: the cluster-scoped names carry them, the bindings select them.
    ml, _ = _rbac("ml")
    dev, _ = _rbac("dev")
    assert not {p["metadata"]["name"] for p in ml} & {p["metadata"]["name"] for p in dev}


# --- the VPA keeps the margin ----------------------------------------------------------------


def vpa_apply(policy: dict, resources: dict, target: dict) -> dict:
    """What the VPA admission controller gives a new pod: the recommender's ``target``
    clamped to ``minAllowed``/``maxAllowed`` as requests, and with ``RequestsAndLimits`` the
    limits scaled by the same factor (their ratio to the requests kept); ``RequestsOnly``
    leaves the limits."""
    out = copy.deepcopy(resources)
    for key, value in target.items():
        lo = parse_quantity(policy["minAllowed"][key])
        hi = parse_quantity(policy["maxAllowed"][key])
        new = min(max(parse_quantity(value), lo), hi)
        old = parse_quantity(resources["requests"][key])
        out["requests"][key] = new
        if policy.get("controlledValues", "RequestsAndLimits") == "RequestsAndLimits":
            out["limits"][key] = parse_quantity(resources["limits"][key]) * new / old
    return out


def test_the_vpa_never_takes_the_headroom_away(outputs):
    job, vpa = _objects(outputs["demo"]["k8s_job"])
    (container,) = job["spec"]["template"]["spec"]["containers"]
    (policy,) = vpa["spec"]["resourcePolicy"]["containerPolicies"]
    recommended = parse_quantity(memory_quantity(SHAPES["demo"].allocation.memory_gb))
    # The recommender's target at the bare peak (1.0 GB), and far under it: clamped.
    for target in ("1Gi", "100Mi"):
        got = vpa_apply(policy, container["resources"], {"memory": target, "cpu": "1"})
        assert got["requests"]["memory"] >= recommended
        assert got["limits"]["memory"] >= recommended
    # Above it the VPA may raise, within the largest trial's need.
    got = vpa_apply(policy, container["resources"], {"memory": "64Gi", "cpu": "1"})
    assert got["limits"]["memory"] == parse_quantity(policy["maxAllowed"]["memory"])
    # The old floor (the bare peak) would have taken the margin away: the clamp matters.
    bare = {**policy, "minAllowed": {**policy["minAllowed"], "memory": "1Gi"}}
    got = vpa_apply(bare, container["resources"], {"memory": "1Gi", "cpu": "1"})
    assert got["limits"]["memory"] < recommended


def test_the_vpa_targets_only_its_own_recommendation(tmp_path):
    """A VPA cannot be owned by a Job not yet created, so the Job's name carries a digest of
    what it runs: another recommendation under the same run name is another Job, which an
    older VPA never targets; the same one applied again is the same pair."""
    shape = SHAPES["demo"]
    names = []
    for i, memory in enumerate((1.25, 1.25, 2.5)):
        folder = tmp_path / str(i)
        folder.mkdir()
        other = JobShape(**{**shape.__dict__,
                            "allocation": Allocation(cpus=2, memory_gb=memory, batch_size=256)})
        job, vpa = _objects(write_cluster_outputs(folder, other)["k8s_job"])
        assert vpa["spec"]["targetRef"]["name"] == job["metadata"]["name"]
        assert vpa["metadata"]["name"] == job["metadata"]["name"] + "-vpa"
        names.append(job["metadata"]["name"])
    assert names[0] == names[1] != names[2]
    assert all(n.startswith("run-20261128-120000-train-mlp-") for n in names)

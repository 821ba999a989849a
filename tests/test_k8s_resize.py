"""A live plan on Kubernetes (issue 40): the Job resized in place per phase, its RBAC, the
resize patch checked against the 1.35 Pod schema, and the actuator against a fake kubectl
(no cluster here: the fakes' pods are checked against the same schema)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import need

from optimizer.reports.k8s_resize import (
    k8s_live_job_yaml,
    k8s_live_rbac_yaml,
    live_job_objects,
    live_limits,
    live_rbac_objects,
    live_recommendation,
    phase_requests,
    resize_patch_json,
)
from optimizer.trials.live import LiveTrial, read_changes
from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry
from optimizer.trials.live.pod_resize import PodResizer, ResizingTrial
from optimizer.trials.live.pod_spec import parse_quantity, pod_requests, resize_state

yaml = need("yaml")
K8S = "1.35.0"
NAME = "ResNet_run"
CONTAINER = "resnet-run"
# The quantity grammar (apimachinery's resource.Quantity): the schema types it only as a string.
QUANTITY = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")


def _plan(phases, *, schedule, fallback=(2, 1.0), memory_max=None, gpus=0) -> LivePlan:
    entries = {k: PhaseEntry(PhaseAllocation(c, m), share=0.5) for k, (c, m) in phases.items()}
    return LivePlan(entries, PhaseAllocation(*fallback), schedule=schedule,
                    memory_max_gb=memory_max, static={"gpus": gpus, "batch_size": 64},
                    source="reinforce, phase in its state")


PLANS = {
    # The shape the main job writes: the training stage is the largest in both resources.
    "train-largest": _plan({"startup": (1, 0.484375), "train": (1, 0.53125)},
                           schedule=["startup", "train"], fallback=(1, 0.390625),
                           memory_max=0.53125),
    "mixed": _plan({"startup": (1, 0.5), "train": (4, 2.0), "eval": (2, 3.0), "save": (1, 3.5)},
                   schedule=["startup", "train", "eval", "train", "save"], memory_max=3.5,
                   gpus=1),
    "no-schedule": _plan({"train": (3, 1.5)}, schedule=[], fallback=(2, 1.0), memory_max=1.5),
    "no-memory": _plan({"startup": (1, None), "train": (2, None)}, schedule=["startup"],
                       fallback=(2, None)),
}


def _objects(plan):
    return live_job_objects(plan, {"OMP_NUM_THREADS": "4", "WEIRD": 'a "q"'}, name=NAME,
                            command=["python", "train.py"], args=["--batch-size", "64"])


def _pod(plan) -> dict:
    """The pod the Job makes (the name a Job's controller would give it)."""
    job = _objects(plan)[1]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{CONTAINER}-x7k2p", "namespace": "default"},
            "spec": copy.deepcopy(job["spec"]["template"]["spec"])}


def _apply(pod: dict, patch: dict) -> dict:
    """A strategic merge of ``patch``: containers matched by name (the schema's merge key,
    checked below), ``resources`` merged key by key."""
    out = copy.deepcopy(pod)
    for c in patch["spec"]["containers"]:
        (target,) = [t for t in out["spec"]["containers"] if t["name"] == c["name"]]
        for key, values in c["resources"].items():
            target["resources"].setdefault(key, {}).update(values)
    return out


def _qos(pod: dict) -> str:
    """The pod's QoS class by the rules in the Kubernetes docs (requests default to limits)."""
    guaranteed, any_set = True, False
    for c in pod["spec"]["containers"]:
        limits = c["resources"].get("limits", {})
        requests = {**limits, **c["resources"].get("requests", {})}
        any_set |= any(k in requests or k in limits for k in ("cpu", "memory"))
        guaranteed &= all(k in limits and parse_quantity(requests[k]) == parse_quantity(
            limits[k]) for k in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable" if any_set else "BestEffort"


def _validate(obj: dict) -> None:
    kv = need("kubernetes_validate")
    kv.validate(obj, K8S, strict=True)
    for c in obj.get("spec", {}).get("containers", []):
        for section in c.get("resources", {}).values():
            assert all(QUANTITY.fullmatch(str(q)) for q in section.values()), section


def test_job_and_rbac_pass_the_1_35_schema_strictly(tmp_path):
    need("kubernetes_validate")
    plan = PLANS["mixed"]
    job, rbac = tmp_path / "k8s-job.yaml", tmp_path / "k8s-live-rbac.yaml"
    job.write_text(k8s_live_job_yaml(plan, {"OMP_NUM_THREADS": "4"}, name=NAME,
                                      command=["python", "train.py"], comment="cloudopt"))
    rbac.write_text(k8s_live_rbac_yaml(NAME, plan, namespace="ml"))
    proc = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict",
                           "--kubernetes-version", K8S, str(job), str(rbac)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for kind in ("configmap/resnet-run-live-plan", "job/resnet-run",
                 "serviceaccount/resnet-run-resizer", "role/resnet-run-resizer",
                 "rolebinding/resnet-run-resizer",
                 "validatingadmissionpolicy/resnet-run-resizer-own-pod.ml",
                 "validatingadmissionpolicybinding/resnet-run-resizer-own-pod.ml",
                 "configmap/resnet-run-resizer-plan-bounds",
                 "validatingadmissionpolicy/resnet-run-resizer-plan-bounds.ml",
                 "validatingadmissionpolicybinding/resnet-run-resizer-plan-bounds.ml"):
        assert f"passed for resource {kind}" in proc.stdout, proc.stdout
    assert [d["kind"] for d in yaml.safe_load_all(job.read_text())] == ["ConfigMap", "Job"]
    assert "may defer" in job.read_text()  # the comment says which phase changes grow


@pytest.mark.parametrize("key", sorted(PLANS))
def test_the_pod_resizes_in_place_under_its_own_account(key):
    plan = PLANS[key]
    configmap, job = _objects(plan)
    spec = job["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    account, role, binding, *_admission = live_rbac_objects(NAME, plan)
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    # The pod mounts no token; its kubectl goes to the proxy sidecar through a kubeconfig.
    assert spec["automountServiceAccountToken"] is False
    assert account["automountServiceAccountToken"] is False
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    for c in spec["containers"]:
        assert sorted((p["resourceName"], p["restartPolicy"]) for p in c["resizePolicy"]) == [
            ("cpu", "NotRequired"), ("memory", "NotRequired")]
        env = {e["name"]: e for e in c["env"]}
        assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["POD_NAMESPACE"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "metadata.namespace"}}
        assert env["CONTAINER_NAME"]["value"] == c["name"] == CONTAINER
        kubeconfig = env["KUBECONFIG"]["value"]
        assert os.path.basename(kubeconfig) in configmap["data"]
        assert "token" not in json.dumps(c["volumeMounts"])
        first = plan.allocation_for(plan.schedule[0] if plan.schedule else None)
        assert env["OMP_NUM_THREADS"]["value"] == str(first.cpus)  # threads start there too
        assert env["WEIRD"]["value"] == 'a "q"'
        assert c["command"][:5] == ["python", "-m", "optimizer", "run", "--plan"]
        assert c["command"][-3:] == ["--", "python", "train.py"]
        assert c["args"] == ["--batch-size", "64"]
        plan_path = c["command"][c["command"].index("--plan") + 1]
        (mount,) = [m for m in c["volumeMounts"] if plan_path.startswith(m["mountPath"] + "/")]
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        assert volume["configMap"]["name"] == configmap["metadata"]["name"]
        text = configmap["data"][os.path.basename(plan_path)]
        assert LivePlan.from_dict(json.loads(text)).to_dict() == plan.to_dict()
    # The YAML text says the same as the objects.
    docs = list(yaml.safe_load_all(k8s_live_job_yaml(plan, {"OMP_NUM_THREADS": "4", "WEIRD":
                                                            'a "q"'}, name=NAME, command=[
        "python", "train.py"], args=["--batch-size", "64"])))
    assert docs == [configmap, job]


@pytest.mark.parametrize("key", sorted(PLANS))
def test_requests_start_at_the_first_phase_and_every_phase_stays_burstable(key):
    plan = PLANS[key]
    pod = _pod(plan)
    (c,) = pod["spec"]["containers"]
    first = plan.allocation_for(plan.schedule[0] if plan.schedule else None)
    allocs = [plan.fallback, *(e.allocation for e in plan.phases.values())]
    assert parse_quantity(c["resources"]["requests"]["cpu"]) == pytest.approx(first.cpus,
                                                                              abs=0.0015)
    assert c["resources"]["limits"]["cpu"] == str(max(a.cpus for a in allocs))
    if plan.memory_max_gb:
        assert c["resources"]["limits"]["memory"] == live_limits(plan)["memory"]
        assert parse_quantity(c["resources"]["limits"]["memory"]) >= plan.memory_max_gb * 2**30
    assert ("nvidia.com/gpu" in c["resources"]["limits"]) == bool(plan.static["gpus"])
    assert _qos(pod) == "Burstable"
    _validate(pod)
    for phase in [*plan.phases, None]:
        patch = json.loads(resize_patch_json(plan, phase, container=NAME))
        assert set(patch) == {"spec"} and set(patch["spec"]) == {"containers"}
        (pc,) = patch["spec"]["containers"]
        assert set(pc) == {"name", "resources"} and set(pc["resources"]) == {"requests"}
        resized = _apply(pod, patch)
        (rc,) = resized["spec"]["containers"]
        assert rc["resources"]["limits"] == c["resources"]["limits"]  # never patched
        assert _qos(resized) == "Burstable", (phase, rc["resources"])
        for k, q in rc["resources"]["requests"].items():
            assert parse_quantity(q) <= parse_quantity(rc["resources"]["limits"][k])
        cpus = plan.allocation_for(phase).cpus
        assert parse_quantity(rc["resources"]["requests"]["cpu"]) == pytest.approx(cpus,
                                                                                  abs=0.0015)
        _validate(resized)
        # The patch body is itself a Pod fragment: it passes the same schema.
        _validate({"apiVersion": "v1", "kind": "Pod", **patch})


def test_the_patch_merges_containers_by_name_in_the_schema():
    kv = need("kubernetes_validate")
    from importlib import resources

    defs = json.loads(resources.files(kv).joinpath(
        "kubernetes-json-schema/v1.35.0-local-strict/_definitions.json").read_text())["$defs"]
    containers = defs["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-patch-strategy"] == "merge"


def test_the_role_grants_exactly_get_and_patch_on_pods_resize():
    objects = live_rbac_objects(NAME, PLANS["mixed"], namespace="ml")
    (role,) = [o for o in objects if o["kind"] == "Role"]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): sorted(r["verbs"])
             for r in role["rules"]}
    # get on pods/resize: kubectl patch reads the subresource first; get on pods: the
    # resizer reads its pod's status. Both held to the own pod by the proxy sidecar.
    assert rules == {(("",), ("pods/resize",)): ["get", "patch"],
                     (("",), ("pods",)): ["get"]}
    cluster_scoped = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert {o["kind"] for o in objects} >= cluster_scoped
    for o in objects:
        assert ("namespace" in o["metadata"]) == (o["kind"] not in cluster_scoped)
        assert o["metadata"].get("namespace", "ml") == "ml"


def test_recommendation_lists_requests_per_phase_and_the_schedule():
    plan = PLANS["mixed"]
    rec = live_recommendation(plan)
    assert rec["requests"]["startup"] == {"cpu": "1", "memory": "512Mi"}
    assert rec["requests"]["train"] == {"cpu": "4", "memory": "2Gi"}
    assert rec["limits"] == {"cpu": "4", "memory": "3584Mi"}
    assert rec["schedule"] == plan.schedule and rec["start_phase"] == "startup"
    assert rec["start_requests"] == rec["requests"]["startup"]
    assert [(t["from"], t["to"], t["grows"]) for t in rec["transitions"]] == [
        ("startup", "train", ["cpu", "memory"]), ("train", "eval", ["memory"]),
        ("eval", "train", ["cpu"]), ("train", "save", ["memory"])]
    json.dumps(rec)
    # The training stage largest in both: its CPU request sits a millicore under the limit.
    assert phase_requests(PLANS["train-largest"], "train") == {"cpu": "999m",
                                                                "memory": "544Mi"}


def test_pod_requests_and_quantities():
    assert parse_quantity("1500m") == 1.5 and parse_quantity("400Mi") == 400 * 2**20
    assert parse_quantity("2Gi") == 2**31 and parse_quantity("1e3") == 1000.0
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity("2 cores")
    limits = {"cpu": "4", "memory": "2Gi"}
    assert pod_requests(8, 4.0, limits) == {"cpu": "3999m", "memory": "2Gi"}  # capped
    assert pod_requests(2, None, limits, {"cpu": "4", "memory": "1Gi"}) == {
        "cpu": "2", "memory": "1Gi"}
    assert pod_requests(None, 0.5, limits, {"cpu": "3"}) == {"cpu": "3", "memory": "512Mi"}
    # A memory request left out defaults to its limit: the pod would be Guaranteed.
    assert pod_requests(4, None, limits) == {"cpu": "3999m"}


# --- the actuator against a fake kubectl ------------------------------------------------


class FakeKubectl:
    """A pod in memory; ``kubectl get`` answers it with the next scripted resize status."""

    def __init__(self, statuses, requests=None, fail=None):
        self.pod = _pod(PLANS["mixed"])
        if requests:
            self.pod["spec"]["containers"][0]["resources"]["requests"] = dict(requests)
        self.held = dict(self.pod["spec"]["containers"][0]["resources"]["requests"])
        self.statuses, self.fail, self.calls = list(statuses), fail, []
        self.patched = False

    def __call__(self, cmd, **kw):
        self.calls.append(cmd)
        assert kw.get("capture_output") and kw.get("text") and kw.get("timeout")
        if self.fail is not None:
            return subprocess.CompletedProcess(cmd, 1, "", self.fail)
        verb = cmd[1]
        assert cmd[2:6] == ["pod", self.pod["metadata"]["name"], "-n", "default"]
        if verb == "patch":
            i = cmd.index("--subresource")
            assert cmd[i:i + 4] == ["--subresource", "resize", "--type", "strategic"]
            self.pod = _apply(self.pod, json.loads(cmd[cmd.index("--patch") + 1]))
            self.patched = True
            return subprocess.CompletedProcess(cmd, 0, "pod/x patched", "")
        assert verb == "get" and cmd[-2:] == ["-o", "json"]
        # Before any patch, a read of the pod as it runs; after, the next scripted status.
        state = (self.statuses.pop(0) if self.statuses else "applied") if self.patched else ""
        self.patched = self.patched and state in ("deferred", "in-progress")
        asked = self.pod["spec"]["containers"][0]["resources"]["requests"]
        if state == "applied":
            self.held = dict(asked)
        pod = copy.deepcopy(self.pod)
        conditions = {"deferred": [("PodResizePending", "Deferred", "Node didn't have enough "
                                   "resource: cpu, requested: 4000, capacity: 3000")],
                      "infeasible": [("PodResizePending", "Infeasible", "Node didn't have "
                                      "enough capacity: memory, requested: 3758096384")],
                      "in-progress": [("PodResizeInProgress", "", "")]}.get(state, [])
        pod["status"] = {"phase": "Running", "qosClass": "Burstable", "conditions": [
            {"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions],
            "containerStatuses": [{"name": CONTAINER, "ready": True, "restartCount": 0,
                                   "image": "img", "imageID": "sha256:0",
                                   "resources": {"requests": self.held}}]}
        _validate(pod)  # the fake's pod is one the 1.35 API could return
        return subprocess.CompletedProcess(cmd, 0, json.dumps(pod), "")


def _resizer(fake, tmp_path, **kw):
    sleeps = []
    r = PodResizer(fake.pod["metadata"]["name"], "default", CONTAINER, runner=fake,
                   trial_dir=tmp_path, control_file=tmp_path / "control.json", retries=3,
                   interval_s=0.5, sleep=sleeps.append, **kw)
    return r, sleeps


def test_a_deferred_resize_is_read_again_until_applied(tmp_path):
    fake = FakeKubectl(["deferred", "deferred", "applied"])
    r, sleeps = _resizer(fake, tmp_path)
    change = r.resize(PhaseAllocation(4, 2.0), cause="plan: phase train", phase="train")
    assert change.status == "applied" and change.attempts == 3 and sleeps == [0.5, 0.5]
    assert change.requests == {"cpu": "4", "memory": "2Gi"}
    assert fake.pod["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "4", "memory": "3584Mi", "nvidia.com/gpu": "1"}
    assert json.loads((tmp_path / "control.json").read_text()) == {"num_threads": 4, "seq": 1}
    (logged,) = read_changes(tmp_path)
    assert (logged.status, logged.phase, logged.num_threads) == ("applied", "train", 4)
    assert logged.skipped == []


def test_a_resize_deferred_past_the_retries_says_so(tmp_path):
    fake = FakeKubectl(["deferred"] * 5)
    r, sleeps = _resizer(fake, tmp_path)
    change = r.resize(PhaseAllocation(4, 2.0), cause="c", phase="train")
    assert change.status == "deferred" and change.attempts == 4 and len(sleeps) == 3
    assert "enough resource: cpu" in change.skipped[0]


def test_an_infeasible_resize_keeps_the_size_and_logs_it(tmp_path):
    fake = FakeKubectl(["infeasible"])
    before = dict(fake.held)
    r, _ = _resizer(fake, tmp_path)
    change = r.resize(PhaseAllocation(4, 3.5), cause="plan: phase save", phase="save")
    assert change.status == "infeasible"
    assert any("Infeasible" in s or "capacity: memory" in s for s in change.skipped)
    assert any(s.startswith("kept at") for s in change.skipped)
    assert fake.pod["spec"]["containers"][0]["resources"]["requests"] == before  # put back
    assert not (tmp_path / "control.json").exists()  # the threads keep their count
    (logged,) = read_changes(tmp_path)
    assert logged.status == "infeasible" and logged.phase == "save"


@pytest.mark.parametrize("how", ["exit", "missing"])
def test_a_kubectl_failure_is_logged_not_raised(tmp_path, how):
    if how == "exit":
        fake = FakeKubectl([], fail='Error from server (Forbidden): pods "x" is forbidden: '
                           'User "system:serviceaccount:default:default" cannot get resource')
        r, _ = _resizer(fake, tmp_path)
    else:
        r = PodResizer("p", "default", CONTAINER, kubectl=str(tmp_path / "no-kubectl"),
                       trial_dir=tmp_path)
    change = r.resize(PhaseAllocation(2, 1.0), cause="c", phase="eval")
    assert change.status == "failed"
    (logged,) = read_changes(tmp_path)
    assert logged.status == "failed"
    assert ("Forbidden" if how == "exit" else "no-kubectl") in logged.skipped[0]


def test_a_fake_kubectl_script_sees_the_arguments(tmp_path):
    """The real subprocess path, with a script standing in for kubectl."""
    pod = _pod(PLANS["mixed"])
    pod["status"] = {"conditions": [{"type": "PodResizeInProgress", "status": "True"}]}
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    script = tmp_path / "kubectl"
    script.write_text(f"#!{sys.executable}\nimport sys, json\n"
                      f"open({str(tmp_path / 'calls.jsonl')!r}, 'a').write(json.dumps("
                      "sys.argv[1:]) + '\\n')\n"
                      f"print(open({str(tmp_path / 'pod.json')!r}).read() if sys.argv[1] == "
                      "'get' else 'patched')\n")
    script.chmod(0o755)
    r = PodResizer("job-x7k2p", "ml", CONTAINER, kubectl=str(script), retries=0,
                   trial_dir=tmp_path)
    change = r.resize(PhaseAllocation(2, 1.0), cause="c", phase="eval")
    assert change.status == "in-progress"
    calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert calls[1][:9] == ["patch", "pod", "job-x7k2p", "-n", "ml", "--subresource",
                            "resize", "--type", "strategic"]
    assert json.loads(calls[1][-1]) == {"spec": {"containers": [{"name": CONTAINER, "resources": {
        "requests": {"cpu": "2", "memory": "1Gi"}}}]}}


def test_resize_state_reads_the_old_status_field_too():
    pod = {"status": {"resize": "Infeasible"}}
    assert resize_state(pod, CONTAINER, {"cpu": "2"})[0] == "infeasible"
    assert resize_state({"status": {"resize": "Deferred"}}, CONTAINER, {})[0] == "deferred"
    assert resize_state({"status": {"resize": "InProgress"}}, CONTAINER, {})[0] == "in-progress"
    stale = {"status": {"containerStatuses": [{"name": CONTAINER, "resources": {
        "requests": {"cpu": "1"}}}]}}
    assert resize_state(stale, CONTAINER, {"cpu": "2"})[0] == "sent"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_resizing_trial_moves_threads_only_when_the_pod_moved(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = LiveTrial(job.pid, tmp_path, control_file=tmp_path / "control.json")
        fake = FakeKubectl(["infeasible", "applied", "applied"])
        r, _ = _resizer(fake, tmp_path)
        trial = ResizingTrial(live, r)
        core = sorted(os.sched_getaffinity(0))[:1]
        kept = trial.set_cpus(core, cause="c", phase="train")
        assert kept.status == "infeasible" and kept.tasks == 0 and kept.cpus is None
        moved = trial.set_cpus(core, cause="c", phase="eval")
        assert moved.status == "applied" and moved.tasks >= 1 and moved.cpus == core
        assert os.sched_getaffinity(job.pid) == set(core)
        mem = trial.set_memory_request(1.5, cause="c", phase="eval")
        assert mem.status == "applied" and mem.requests == {"cpu": "1", "memory": "1536Mi"}
        assert [c.status for c in read_changes(tmp_path)] == ["infeasible", "applied",
                                                              "applied"]
    finally:
        job.kill()
        job.wait()


def test_a_phase_change_of_cores_and_memory_is_one_resize_patch(tmp_path):
    """The controller asks a pod for a stage's cores and memory together: a stage that needs
    more gets both in one ``kubectl patch`` at once, never a half-resized pod between two. A
    stage that needs less gets its cores at once and its lower memory request only after the
    hold-down (VPA's updater), in a patch of its own."""
    from optimizer.trials.live.controller import Controller, PlanDecider
    from optimizer.trials.live.memory_rules import MemoryPolicy
    from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry

    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = LiveTrial(job.pid, tmp_path, control_file=tmp_path / "control.json")
        fake = FakeKubectl([])
        r, _ = _resizer(fake, tmp_path)
        plan = LivePlan(phases={"startup": PhaseEntry(PhaseAllocation(1, 1.5)),
                                "train": PhaseEntry(PhaseAllocation(2, 3.0))},
                        fallback=PhaseAllocation(2, 3.0))
        stage = ["train"]
        rows = []
        ctl = Controller(ResizingTrial(live, r), PlanDecider(plan), lambda: stage[0],
                         cores=sorted(os.sched_getaffinity(0))[:2],
                         initial=PhaseAllocation(1, 1.5), usage=lambda: rows,
                         memory_policy=MemoryPolicy(hold_s=0.2, window_s=0.2, min_samples=1))

        def step():
            rows.append({"time_s": live.now(), "cpu_cores": 1.0, "mem_gb": 0.05})
            return ctl.step()

        (change,) = step()  # more of both: one patch, at once
        assert change.status == "applied"
        stage[0] = "startup"
        (change,) = step()  # fewer cores at once; the memory is held
        assert change.status == "applied" and ctl.held == PhaseAllocation(1, 3.0)
        time.sleep(0.25)
        (change,) = step()  # after the hold-down: the lower request
        assert change.status == "applied" and ctl.held == PhaseAllocation(1, 1.5)
        patches = [json.loads(c[c.index("--patch") + 1]) for c in fake.calls if c[1] == "patch"]
        asked = [p["spec"]["containers"][0]["resources"]["requests"] for p in patches]
        assert asked == [{"cpu": "2", "memory": "3Gi"}, {"cpu": "1", "memory": "3Gi"},
                         {"cpu": "1", "memory": "1536Mi"}]
    finally:
        job.kill()
        job.wait()

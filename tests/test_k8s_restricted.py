"""Every generated manifest against the Kubernetes 1.35 schema and the Pod Security Standards'
``restricted`` profile (issue 62, part 2), and the profile checker against pods that break
one rule each, so a checker that passes everything cannot hide here.

The rules are those of https://kubernetes.io/docs/concepts/security/pod-security-standards/
(baseline and restricted, Linux pods), checked the way the PodSecurity admission plugin reads
them: a pod-level setting counts for every container that does not override it.
"""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest
from conftest import need

from optimizer.foundation.allocation import Allocation
from optimizer.reports.k8s import PLACEHOLDER_IMAGE, k8s_job_yaml
from optimizer.reports.k8s_resize import k8s_live_job_yaml, k8s_live_rbac_yaml
from optimizer.reports.k8s_security import (
    DEFAULT_DEADLINE_S,
    MIN_DEADLINE_S,
    image_tag,
    job_deadline,
    pinned_image,
)
from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry

yaml = need("yaml")
K8S = "1.35.0"

# --- the checker -----------------------------------------------------------------------

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t",
                 "container_engine_t"}
SECCOMP_OK = ("RuntimeDefault", "Localhost")
APPARMOR_OK = ("RuntimeDefault", "Localhost")
POD_KINDS = {"Pod": (), "Job": ("spec", "template"), "CronJob": ("spec", "jobTemplate", "spec",
                                                                 "template"),
             "Deployment": ("spec", "template"), "StatefulSet": ("spec", "template"),
             "DaemonSet": ("spec", "template"), "ReplicaSet": ("spec", "template")}


def pod_templates(obj: dict) -> list[tuple[dict, dict]]:
    """(metadata, pod spec) of the pod ``obj`` is or makes; none for other kinds."""
    if obj.get("kind") not in POD_KINDS:
        return []
    node = obj
    for key in POD_KINDS[obj["kind"]]:
        node = node[key]
    return [(node.get("metadata") or {}, node["spec"])]


def _se_linux(options: dict | None, where: str) -> list[str]:
    options = options or {}
    out = []
    if options.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}: seLinuxOptions.type {options['type']} not allowed")
    if options.get("user") or options.get("role"):
        out.append(f"{where}: seLinuxOptions user/role must be unset")
    return out


def _app_armor(context: dict, where: str) -> list[str]:
    kind = (context.get("appArmorProfile") or {}).get("type")
    if kind is not None and kind not in APPARMOR_OK:
        return [f"{where}: appArmorProfile {kind} not allowed"]
    return []


def restricted_violations(spec: dict, metadata: dict | None = None) -> list[str]:
    """What in pod ``spec`` the ``restricted`` profile refuses (empty: admitted)."""
    out: list[str] = []
    psc = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"host namespaces: {field} is true")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("pod: windowsOptions.hostProcess is true")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            out.append(f"volume {volume['name']}: hostPath")
        elif kinds - ALLOWED_VOLUMES:
            out.append(f"volume {volume['name']}: type {sorted(kinds)} not allowed")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"pod: sysctl {sysctl.get('name')} not allowed")
    out += _se_linux(psc.get("seLinuxOptions"), "pod") + _app_armor(psc, "pod")
    for key, value in ((metadata or {}).get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value == "runtime/default" or value.startswith("localhost/")):
            out.append(f"annotation {key}: {value} not allowed")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_OK:
        out.append(f"pod: seccompProfile {pod_seccomp} not allowed")
    if psc.get("runAsUser") == 0:
        out.append("pod: runAsUser 0")
    containers = [(kind, c) for kind in ("initContainers", "containers", "ephemeralContainers")
                  for c in spec.get(kind) or []]
    for kind, c in containers:
        where = f"{kind}/{c.get('name')}"
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{where}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{where}: windowsOptions.hostProcess is true")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{where}: hostPort")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{where}: procMount {sc['procMount']}")
        out += _se_linux(sc.get("seLinuxOptions"), where) + _app_armor(sc, where)
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}: allowPrivilegeEscalation must be false")
        if sc.get("runAsNonRoot") is False or sc.get("runAsNonRoot",
                                                      psc.get("runAsNonRoot")) is not True:
            out.append(f"{where}: runAsNonRoot must be true (pod or container)")
        if sc.get("runAsUser") == 0:
            out.append(f"{where}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp not in SECCOMP_OK and not (seccomp is None and pod_seccomp in SECCOMP_OK):
            out.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{where}: capabilities must drop ALL")
        added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            out.append(f"{where}: capabilities add {sorted(added)}")
    return out


# --- what cloudopt writes ---------------------------------------------------------------


def _plan(gpus: int) -> LivePlan:
    return LivePlan({"startup": PhaseEntry(PhaseAllocation(1, 0.5), share=0.2),
                     "train": PhaseEntry(PhaseAllocation(4, 2.0), share=0.8)},
                    PhaseAllocation(2, 1.0), schedule=["startup", "train"],
                    memory_max_gb=2.0, static={"gpus": gpus, "batch_size": 64},
                    source="reinforce")


def generated_files() -> dict[str, str]:
    """Each manifest cloudopt writes, in the shapes that differ (GPUs, SLA, namespace)."""
    env = {"OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": ""}
    files = {}
    for gpus in (0, 1):
        files[f"k8s-job-gpus{gpus}.yaml"] = k8s_job_yaml(
            Allocation(gpus=gpus, cpus=4, memory_gb=6.0, batch_size=128), env,
            name="ResNet_run", command=["python", "train.py"], args=["--bs", "128"],
            memory_bounds_gb=(5.0, 8.0), cpu_bounds=(3.0, 8), comment="cloudopt",
            sla_time_s=3600 if gpus else None, predicted_time_s=900 if gpus else None)
        files[f"k8s-live-job-gpus{gpus}.yaml"] = k8s_live_job_yaml(
            _plan(gpus), env, name="ResNet_run", command=["python", "train.py"],
            image="registry.example.com/team/train:2.1" if gpus else None,
            namespace="ml" if gpus else None, comment="cloudopt")
    files["k8s-live-rbac.yaml"] = k8s_live_rbac_yaml("ResNet_run", _plan(0))
    files["k8s-live-rbac-ml.yaml"] = k8s_live_rbac_yaml("ResNet_run", _plan(1), namespace="ml")
    return files


FILES = generated_files()


def _objects(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("filename", sorted(FILES))
def test_every_pod_passes_the_restricted_profile(filename):
    objects = _objects(FILES[filename])
    pods = [t for o in objects for t in pod_templates(o)]
    assert bool(pods) == ("job" in filename)
    for metadata, spec in pods:
        assert restricted_violations(spec, metadata) == []
        # Beyond the profile: a read-only root, every emptyDir bounded, the image pinned.
        for c in spec["containers"] + spec.get("initContainers", []):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["imagePullPolicy"] == "IfNotPresent"
            assert image_tag(c["image"]) not in (None, "latest")
        for v in spec["volumes"]:
            if "emptyDir" in v:
                assert v["emptyDir"].get("sizeLimit"), v
        mounted = {m["mountPath"] for c in spec["containers"] for m in c["volumeMounts"]}
        assert {"/tmp", "/home/cloudopt"} <= mounted
        (main,) = spec["containers"]
        assert {"name": "HOME", "value": "/home/cloudopt"} in main["env"]


@pytest.mark.parametrize("filename", sorted(FILES))
def test_every_object_passes_the_1_35_schema(filename):
    kv = need("kubernetes_validate")
    checked = 0
    for obj in _objects(FILES[filename]):
        if obj["apiVersion"].startswith("autoscaling.k8s.io/"):
            continue  # the VPA is a CRD: test_report_k8s checks its documented fields
        kv.validate(obj, K8S, strict=True)
        checked += 1
    assert checked


def test_the_1_35_schema_has_the_admission_policy_api():
    """ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) since 1.30: the
    schema the objects are checked against must know it, or the check proves nothing."""
    kv = need("kubernetes_validate")
    base = resources.files(kv).joinpath(f"kubernetes-json-schema/v{K8S}-local-strict")
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        schema = json.loads(base.joinpath(f"{kind}-admissionregistration-v1.json").read_text())
        assert "admissionregistration.k8s.io/v1" in json.dumps(schema)
    with pytest.raises(kv.ValidationError):
        kv.validate({"apiVersion": "admissionregistration.k8s.io/v1",
                     "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "x"},
                     "spec": {"validations": [{"expresion": "true"}]}}, K8S, strict=True)


def test_jobs_end_at_a_deadline_and_are_deleted_after():
    for filename, text in FILES.items():
        for obj in _objects(text):
            if obj["kind"] == "Job":
                spec = obj["spec"]
                assert spec["backoffLimit"] == 0
                assert spec["activeDeadlineSeconds"] > 0 and spec["ttlSecondsAfterFinished"] > 0
                assert "activeDeadlineSeconds" in text.split("apiVersion")[0], filename
    gpu_job = _objects(FILES["k8s-job-gpus1.yaml"])[0]
    assert gpu_job["spec"]["activeDeadlineSeconds"] == 3600  # its SLA
    deadline, why = job_deadline(7200, 900)
    assert deadline == 7200 and why.startswith("the SLA's time limit")
    # A prediction over the SLA: the deadline gives the run room instead of ending it.
    deadline, why = job_deadline(3600, 4000)
    assert deadline == 12000 and why.startswith("3x the predicted")
    # An SLA of seconds (derived from a forecast) never ends a job that fast.
    assert job_deadline(1.2, 0.5)[0] == MIN_DEADLINE_S
    assert job_deadline(None, 100)[0] == MIN_DEADLINE_S
    assert job_deadline(None, 5000)[0] == 15000
    assert job_deadline(None, None)[0] == DEFAULT_DEADLINE_S
    assert job_deadline(float("nan"), 0)[0] == DEFAULT_DEADLINE_S


def test_images_are_pinned_and_an_unpinned_one_is_flagged():
    assert image_tag(PLACEHOLDER_IMAGE) not in (None, "latest")
    assert pinned_image(None) == (PLACEHOLDER_IMAGE, [])
    assert image_tag("localhost:5000/train") is None  # a registry port is not a tag
    assert image_tag("localhost:5000/train:3") == "3"
    assert image_tag("train@sha256:abc") == "@sha256:abc"
    for image in ("train", "registry.example.com/train:latest"):
        chosen, notes = pinned_image(image)
        assert chosen == image and "not pinned" in notes[0]
    text = k8s_job_yaml(Allocation(gpus=0, cpus=1, memory_gb=1.0), {}, name="x",
                        command=["python", "t.py"], image="train:latest",
                        memory_bounds_gb=(1.0, 1.0), cpu_bounds=(1.0, 1.0))
    assert "# image train:latest is not pinned" in text


# --- the checker refuses what the profile refuses ---------------------------------------


def _live_pod() -> tuple[dict, dict]:
    job = [o for o in _objects(FILES["k8s-live-job-gpus0.yaml"]) if o["kind"] == "Job"][0]
    return pod_templates(job)[0]


def _main(spec: dict) -> dict:
    return spec["containers"][0]


def _sidecar(spec: dict) -> dict:
    return spec["initContainers"][0]


BREAKS = {
    "privileged": lambda s: _main(s)["securityContext"].update(privileged=True),
    "hostNetwork": lambda s: s.update(hostNetwork=True),
    "hostPID": lambda s: s.update(hostPID=True),
    "hostIPC": lambda s: s.update(hostIPC=True),
    "hostPort": lambda s: _main(s).update(ports=[{"containerPort": 80, "hostPort": 80}]),
    "hostPath": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "nfs volume": lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "a",
                                                                      "path": "/"}}),
    "no runAsNonRoot": lambda s: s["securityContext"].pop("runAsNonRoot"),
    "container runAsNonRoot false": lambda s: _sidecar(s)["securityContext"].update(
        runAsNonRoot=False),
    "runAsUser 0": lambda s: _main(s)["securityContext"].update(runAsUser=0),
    "escalation unset": lambda s: _sidecar(s)["securityContext"].pop(
        "allowPrivilegeEscalation"),
    "escalation true": lambda s: _main(s)["securityContext"].update(
        allowPrivilegeEscalation=True),
    "no drop ALL": lambda s: _main(s)["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
    "add SYS_ADMIN": lambda s: _main(s)["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"]),
    "no seccomp": lambda s: s["securityContext"].pop("seccompProfile"),
    "container Unconfined": lambda s: _main(s)["securityContext"].update(
        seccompProfile={"type": "Unconfined"}),
    "procMount": lambda s: _main(s)["securityContext"].update(procMount="Unmasked"),
    "sysctl": lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax",
                                                              "value": "1"}]),
    "selinux type": lambda s: s["securityContext"].update(seLinuxOptions={"type": "spc_t"}),
    "apparmor": lambda s: _main(s)["securityContext"].update(
        appArmorProfile={"type": "Unconfined"}),
    "hostProcess": lambda s: s["securityContext"].update(windowsOptions={"hostProcess": True}),
}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_the_checker_refuses_a_pod_breaking_one_rule(rule):
    metadata, spec = _live_pod()
    assert restricted_violations(spec, metadata) == []
    broken = copy.deepcopy(spec)
    BREAKS[rule](broken)
    assert restricted_violations(broken, metadata), rule


def test_the_checker_allows_what_the_profile_allows():
    metadata, spec = _live_pod()
    spec = copy.deepcopy(spec)
    _main(spec)["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    _main(spec)["securityContext"]["seccompProfile"] = {"type": "Localhost",
                                                        "localhostProfile": "p.json"}
    spec["securityContext"]["sysctls"] = [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]
    spec["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "d"}})
    assert restricted_violations(spec, metadata) == []
    annotated = {"annotations": {"container.apparmor.security.beta.kubernetes.io/x":
                                 "unconfined"}}
    assert restricted_violations(spec, annotated)

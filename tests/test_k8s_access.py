"""Least privilege for the live job's pod (issue 62, part 1): the admission policy's CEL run
by a CEL evaluator on the requests the API server would build, the token mounted only into
the proxy sidecar, and the proxy's path filter, by its regular expressions and, where kubectl
is installed, by a real ``kubectl proxy`` in front of a stand-in API server."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import need
from k8s_admission import decide, resized

from optimizer.reports.k8s import dns_label
from optimizer.reports.k8s_access import (
    POD_NAME_EXTRA,
    PROXY_URL,
    TOKEN_DIR,
    accept_paths,
    admission_expressions,
    proxy_kubeconfig,
    service_account_name,
)
from optimizer.reports.k8s_resize import live_job_objects, live_rbac_objects, phase_requests
from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry

NAME = "ResNet_run"
ACCOUNT = service_account_name(NAME)
PLAN = LivePlan({"startup": PhaseEntry(PhaseAllocation(1, 0.5), share=0.5),
                 "train": PhaseEntry(PhaseAllocation(2, 1.0), share=0.5)},
                PhaseAllocation(2, 1.0), schedule=["startup", "train"], memory_max_gb=1.0,
                static={"gpus": 0, "batch_size": 32}, source="test")


def _pod_spec() -> dict:
    job = live_job_objects(PLAN, {}, name=NAME, command=["python", "train.py"])[1]
    return job["spec"]["template"]["spec"]


def _policy(namespace: str | None) -> dict:
    """The own-pod policy (the bounds policy beside it: tests/test_k8s_admission.py)."""
    (policy,) = [o for o in live_rbac_objects(NAME, PLAN, namespace=namespace)
                 if o["kind"] == "ValidatingAdmissionPolicy" and "own-pod" in
                 o["metadata"]["name"]]
    return policy


# --- the admission policy, evaluated ----------------------------------------------------


def _request(*, target: str, token_pod: str | None, namespace: str = "ml",
             account_ns: str = "ml", account: str = ACCOUNT) -> dict:
    """The ``request`` a pods/resize PATCH is admitted with (an AdmissionRequest: a PATCH
    reaches admission as UPDATE; user-info extra values are lists of strings)."""
    extra = {}
    if token_pod is not None:  # a pod-bound projected token carries its pod
        extra = {POD_NAME_EXTRA: [token_pod],
                 "authentication.kubernetes.io/pod-uid": ["0b7c6a2e-uid"],
                 "authentication.kubernetes.io/credential-id": ["JTI=5d2c"],
                 "authentication.kubernetes.io/node-name": ["node-1"]}
    return {"uid": "705ab4f5", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "resize", "name": target, "namespace": namespace,
            "operation": "UPDATE",
            "userInfo": {"username": f"system:serviceaccount:{account_ns}:{account}",
                         "uid": "9f1e", "groups": ["system:serviceaccounts",
                                                   f"system:serviceaccounts:{account_ns}",
                                                   "system:authenticated"],
                         "extra": extra},
            "dryRun": False}


def _decide(policy: dict, request: dict) -> str:
    """``skipped``, ``admitted`` or ``refused`` for a resize of the training container from
    the plan's first phase to its second (:func:`k8s_admission.decide`)."""
    pod = {"metadata": {"name": request["name"], "namespace": request["namespace"]},
           "spec": _pod_spec()}
    after = resized(pod, dns_label(NAME), phase_requests(PLAN, "train"))
    return decide(policy, request, obj=after, old=pod)


@pytest.mark.parametrize("namespace", [None, "ml"])
def test_the_policy_admits_the_own_pod_and_refuses_a_neighbour(namespace):
    policy = _policy(namespace)
    assert _decide(policy, _request(target="resnet-run-x7k2p",
                                    token_pod="resnet-run-x7k2p")) == "admitted"
    # The same token on a neighbour: refused, whoever the neighbour is.
    for neighbour in ("resnet-run-b9q4z", "db-0", "resnet-run-x7k2p-evil"):
        assert _decide(policy, _request(target=neighbour,
                                        token_pod="resnet-run-x7k2p")) == "refused"
    # A token bound to no pod (kubectl create token): no pod to be its own.
    assert _decide(policy, _request(target="resnet-run-x7k2p", token_pod=None)) == "refused"
    # Another account is not this policy's to judge (its own RBAC decides).
    other = _request(target="db-0", token_pod="app-1", account="app")
    assert _decide(policy, other) == "skipped"


def test_an_account_of_the_same_name_elsewhere():
    """A pod's token is its own namespace's account: a target in another namespace is
    refused where the namespace is unknown, and not matched where it is written in."""
    across = _request(target="resnet-run-x7k2p", token_pod="resnet-run-x7k2p",
                      namespace="prod", account_ns="ml")
    assert _decide(_policy(None), across) == "refused"
    assert _decide(_policy("ml"), across) == "refused"
    elsewhere = _request(target="resnet-run-x7k2p", token_pod="resnet-run-x7k2p",
                         namespace="dev", account_ns="dev")
    assert _decide(_policy("ml"), elsewhere) == "skipped"
    assert _decide(_policy(None), elsewhere) == "admitted"  # its own pod, in its namespace


def test_the_policy_matches_resize_updates_only_and_is_enforced():
    policy = _policy("ml")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods/resize"] and rule["operations"] == ["UPDATE"]
    assert rule["apiGroups"] == [""] and rule["scope"] == "Namespaced"
    assert policy["spec"]["failurePolicy"] == "Fail"
    (binding,) = [o for o in live_rbac_objects(NAME, PLAN, namespace="ml")
                  if o["kind"] == "ValidatingAdmissionPolicyBinding"
                  and o["spec"]["policyName"] == policy["metadata"]["name"]]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "ml"}}
    conditions, validations = admission_expressions(NAME, "ml")
    assert conditions == policy["spec"]["matchConditions"]
    assert f"system:serviceaccount:ml:{ACCOUNT}" in conditions[0]["expression"]
    assert any("request.name" in v["expression"] for v in validations)


# --- the token lives in the sidecar only ------------------------------------------------


def _token_volumes(spec: dict) -> set[str]:
    return {v["name"] for v in spec["volumes"]
            if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))}


def test_only_the_proxy_sidecar_mounts_the_token():
    spec = _pod_spec()
    assert spec["automountServiceAccountToken"] is False
    tokens = _token_volumes(spec)
    assert len(tokens) == 1
    (main,) = spec["containers"]
    assert not {m["name"] for m in main["volumeMounts"]} & tokens
    assert not any(m["mountPath"].startswith("/var/run/secrets") for m in main["volumeMounts"])
    (sidecar,) = spec["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar: ends with the job
    (mount,) = [m for m in sidecar["volumeMounts"] if m["name"] in tokens]
    assert mount["mountPath"] == TOKEN_DIR and mount["readOnly"] is True
    assert sidecar["command"][:2] == ["kubectl", "proxy"]
    assert "shareProcessNamespace" not in spec  # the job cannot reach the sidecar's files
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["KUBECONFIG"].endswith("/kubeconfig")
    yaml = need("yaml")
    config = yaml.safe_load(proxy_kubeconfig())
    assert config["clusters"][0]["cluster"] == {"server": PROXY_URL}
    assert "users" not in config  # no credentials in the job's container


def _expand(arg: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion of a container's command."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), arg)


OWN = {"POD_NAME": "resnet-run-x7k2p", "POD_NAMESPACE": "ml"}
PASS = ["/api/v1/namespaces/ml/pods/resnet-run-x7k2p",
        "/api/v1/namespaces/ml/pods/resnet-run-x7k2p/resize", "/api", "/api/v1", "/apis",
        "/apis/batch/v1", "/version"]
REFUSE = ["/api/v1/namespaces/ml/pods/db-0", "/api/v1/namespaces/ml/pods/db-0/resize",
          "/api/v1/namespaces/ml/pods", "/api/v1/pods", "/api/v1/namespaces/ml/secrets",
          "/api/v1/namespaces/ml/secrets/token", "/apis/batch/v1/namespaces/ml/jobs",
          "/api/v1/namespaces/ml/pods/resnet-run-x7k2p/exec",
          "/api/v1/namespaces/ml/pods/resnet-run-x7k2p/log",
          "/api/v1/namespaces/ml/pods/resnet-run-x7k2p/../db-0",
          "/api/v1/namespaces/ml/pods/resnet-run-x7k2p2",
          "/api/v1/namespaces/other/pods/resnet-run-x7k2p"]


def test_the_proxy_forwards_only_the_own_pod():
    (sidecar,) = _pod_spec()["initContainers"]
    (flag,) = [a for a in sidecar["command"] if a.startswith("--accept-paths=")]
    patterns = [re.compile(p) for p in _expand(flag.split("=", 1)[1], OWN).split(",")]
    assert len(patterns) == len(accept_paths())
    for path in PASS:
        assert any(p.search(path) for p in patterns), path
    for path in REFUSE:
        assert not any(p.search(path) for p in patterns), path


# --- a real kubectl proxy in front of a stand-in API server -----------------------------


class _FakeApi(BaseHTTPRequestHandler):
    """Answers discovery, GET of any pod (and its resize subresource) and PATCH of resize,
    recording each request; the pods live in ``server.pods``."""

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _any(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size) if size else b""
        path = self.path.split("?")[0]
        self.server.seen.append((self.command, path))
        parts = path.strip("/").split("/")
        if path == "/version":
            return self._send(200, {"major": "1", "minor": "35", "gitVersion": "v1.35.0"})
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                                    "serverAddressByClientCIDRs": []})
        if path == "/apis":
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if path == "/api/v1":
            verbs = ["get", "patch"]
            return self._send(200, {"kind": "APIResourceList", "groupVersion": "v1",
                                    "resources": [
                                        {"name": "pods", "singularName": "pod", "kind": "Pod",
                                         "namespaced": True, "verbs": verbs},
                                        {"name": "pods/resize", "singularName": "",
                                         "kind": "Pod", "namespaced": True, "verbs": verbs}]})
        if len(parts) >= 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            pod = self.server.pods.get(parts[5])
            if pod is None:
                return self._send(404, {"kind": "Status", "apiVersion": "v1", "code": 404,
                                        "status": "Failure", "reason": "NotFound"})
            if self.command == "PATCH":
                for c in json.loads(body)["spec"]["containers"]:
                    (target,) = [t for t in pod["spec"]["containers"] if t["name"] == c["name"]]
                    target["resources"]["requests"].update(c["resources"]["requests"])
                    # The kubelet takes it up at once here: the status follows the spec.
                    status = pod["status"]["containerStatuses"][0]["resources"]
                    status["requests"] = dict(target["resources"]["requests"])
            return self._send(200, pod)
        return self._send(404, {"kind": "Status", "apiVersion": "v1", "code": 404})

    do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _any


def _stand_in_pod(name: str) -> dict:
    spec = copy.deepcopy(_pod_spec())
    requests = spec["containers"][0]["resources"]["requests"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": spec, "status": {"phase": "Running", "containerStatuses": [
                {"name": spec["containers"][0]["name"], "resources": {
                    "requests": dict(requests)}}]}}


@pytest.fixture
def proxied(tmp_path, monkeypatch):
    """The sidecar's own ``kubectl proxy`` command (expanded as the kubelet would, on a free
    port, the stand-in server standing in for in-cluster credentials), and the job
    container's kubeconfig pointing at it."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    server.seen, server.pods = [], {n: _stand_in_pod(n) for n in ("resnet-run-x7k2p", "db-0")}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = tmp_path / "upstream.yaml"
    upstream.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c"}}]}))
    (sidecar,) = _pod_spec()["initContainers"]
    command = [_expand(a, OWN) for a in sidecar["command"]]
    command = [a for a in command if not a.startswith("--port=")]
    command = [kubectl, *command[1:], "--port=0", f"--kubeconfig={upstream}"]
    # No KUBECONFIG and a HOME of its own: the proxy reads only the upstream file.
    proxy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env={"PATH": os.environ.get("PATH", ""),
                                             "HOME": str(tmp_path)})
    try:
        line = proxy.stdout.readline()  # "Starting to serve on 127.0.0.1:PORT"
        port = re.search(r":(\d+)\s*$", line)
        assert port, line
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(proxy_kubeconfig().replace(PROXY_URL,
                                                         f"http://127.0.0.1:{port[1]}"))
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.setenv("HOME", str(tmp_path))
        yield server
    finally:
        proxy.terminate()
        proxy.wait(10)
        server.shutdown()
        server.server_close()


def test_the_resizer_works_through_the_proxy_and_reaches_no_neighbour(proxied, tmp_path):
    from optimizer.trials.live.pod_resize import PodResizer

    container = _pod_spec()["containers"][0]["name"]
    own = PodResizer("resnet-run-x7k2p", "ml", container, retries=0, trial_dir=tmp_path)
    change = own.resize(PhaseAllocation(2, 1.0), cause="test", phase="train")
    assert change.status == "applied", change.skipped
    assert ("PATCH", "/api/v1/namespaces/ml/pods/resnet-run-x7k2p/resize") in proxied.seen
    before = len(proxied.seen)
    neighbour = PodResizer("db-0", "ml", container, retries=0)
    change = neighbour.resize(PhaseAllocation(1, 0.5), cause="test", phase="startup")
    assert change.status == "failed" and "Forbidden" in change.skipped[0]
    for path in ("/api/v1/namespaces/ml/pods", "/api/v1/namespaces/ml/secrets"):
        proc = subprocess.run(["kubectl", "get", "--raw", path], capture_output=True,
                              text=True, timeout=30)
        assert proc.returncode != 0 and "Forbidden" in proc.stderr
    assert not any("db-0" in p or p.endswith(("/pods", "/secrets"))
                   for _, p in proxied.seen[before:])
    assert proxied.pods["db-0"]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1", "memory": "512Mi"}

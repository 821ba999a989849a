"""Who may call the Kubernetes API from a live plan's pod, and for what.

The wrapper that resizes the pod (``python -m optimizer run --plan``) runs in the same
container as the user's script: it starts the script as its child, pins the child's threads
and reads ``/proc`` for it, so it cannot move to a container of its own without changing how
the job is run. What can move is the credential. The pod mounts no service-account token
(``automountServiceAccountToken: false``); a native sidecar (an init container with
``restartPolicy: Always``) alone mounts a projected, pod-bound token and runs ``kubectl proxy``
on the pod's loopback, forwarding only what the resizer calls: its own pod, that pod's
``resize`` subresource, and the discovery documents kubectl reads first. The wrapper's kubectl
reaches it through a kubeconfig with no credentials. So code in the job can read and resize
its own pod, and nothing else: it never holds the token.

Behind the proxy, the API server checks again:

* the Role grants ``get``/``patch`` on ``pods/resize`` and ``get`` on ``pods`` in the
  namespace. RBAC cannot name a Job's generated pod, so this reaches every pod there;
* a ValidatingAdmissionPolicy admits a ``pods/resize`` update from this account only when the
  target is the pod its token was issued to (the token's user-info extra
  ``authentication.kubernetes.io/pod-name``), so even a leaked token cannot resize a
  neighbour; and only when nothing but the training container's cpu and memory requests
  change (not its limits, not another resource, never the proxy sidecar);
* a second policy holds those requests within what the live plan can ask (its smallest and
  largest cpu and memory request), read from a ConfigMap in the job's own namespace
  (``paramKind``; the binding looks the parameter up in the namespace of each request). Two
  namespaces running a job of one name share the cluster-scoped policies, which depend on the
  name only, never each other's bounds. If that ConfigMap is missing the bounds are not
  judged (``parameterNotFoundAction: Allow``: Deny would refuse every pod resize in every
  namespace without it), while the first policy still is; the account cannot delete it.

Admission never sees reads: the ``get`` on pods (the resizer reads its pod's spec and resize
status with ``kubectl get pod``, and ``kubectl patch`` reads the subresource first) is held to
the own pod by the proxy alone.
"""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Mapping
from typing import Any

from optimizer.reports.k8s import dns_label
from optimizer.reports.k8s_security import (
    PULL_POLICY,
    container_security_context,
    scratch_volume,
)
from optimizer.reports.k8s_yaml import to_yaml

PROXY_NAME = "api-proxy"
PROXY_PORT = 8001
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where kubectl's in-cluster configuration looks for the token, CA and namespace."""
TOKEN_EXPIRY_S = 3600
"""The projected token's lifetime; the kubelet rotates it at 80 %, kubectl re-reads it."""
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
"""The user-info extra a pod-bound service-account token carries: the pod's name."""
_PROXY_HOME = "/home/proxy"
# The proxy's own small HOME: kubectl caches there, and a HOME shared with the job would let
# the job plant a kubeconfig for it.
_PROXY_RESOURCES = {"requests": {"cpu": "10m", "memory": "64Mi"},
                    "limits": {"cpu": "200m", "memory": "192Mi"}}
_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io/v1"


def service_account_name(name: str) -> str:
    """The ServiceAccount (and Role, RoleBinding) of the job ``name``."""
    return f"{dns_label(name)[:50].rstrip('-')}-resizer"


def policy_name(name: str, namespace: str | None = None) -> str:
    """The ValidatingAdmissionPolicy and its binding (cluster-scoped: the namespace, when
    known, keeps two namespaces' jobs of one name apart)."""
    base = f"{service_account_name(name)}-own-pod"
    return f"{base}.{namespace}" if namespace else base


def accept_paths() -> list[str]:
    """The proxy's ``--accept-paths``: this pod and its ``resize`` subresource (the pod's
    name and namespace come from the container's environment, ``$(VAR)`` expanded by the
    kubelet), and the discovery documents kubectl reads before any call."""
    own = "^/api/v1/namespaces/$(POD_NAMESPACE)/pods/$(POD_NAME)(/resize)?$"
    return [own, "^/api$", "^/api/v1$", "^/apis$", "^/apis/[^/]+/[^/]+$", "^/version$"]


def proxy_kubeconfig() -> str:
    """The kubeconfig of the job's container: the proxy, and no credentials at all."""
    config = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": PROXY_NAME, "cluster": {"server": PROXY_URL}}],
              "contexts": [{"name": PROXY_NAME, "context": {"cluster": PROXY_NAME}}],
              "current-context": PROXY_NAME}
    return to_yaml([config])


def proxy_sidecar(image: str, *, kubeconfig: str, plan_mount: dict[str, Any],
                  taken: str) -> dict[str, Any]:
    """The native sidecar holding the token: ``kubectl proxy`` limited to this pod.

    ``kubeconfig`` is the path of :func:`proxy_kubeconfig` under ``plan_mount`` (its startup
    probe asks the proxy for ``/version`` through it, so the job starts once the proxy
    answers); ``taken`` is the job container's name, which the sidecar's must differ from.
    """
    env: list[dict[str, Any]] = [
        {"name": k, "valueFrom": {"fieldRef": {"fieldPath": p}}}
        for k, p in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"))]
    env.append({"name": "HOME", "value": _PROXY_HOME})
    command = ["kubectl", "proxy", "--address=127.0.0.1", f"--port={PROXY_PORT}",
               f"--accept-paths={','.join(accept_paths())}",
               # The resizer reads (GET) and patches (PATCH); nothing else need pass.
               "--reject-methods=^(POST|PUT|DELETE)$"]
    probe = ["kubectl", f"--kubeconfig={kubeconfig}", "get", "--raw", "/version"]
    _, home_mount = scratch_volume("proxy-home", _PROXY_HOME, "64Mi")
    return {"name": PROXY_NAME if taken != PROXY_NAME else f"{PROXY_NAME}-0",
            "image": image, "imagePullPolicy": PULL_POLICY,
            "restartPolicy": "Always", "command": command, "env": env,
            "resources": copy.deepcopy(_PROXY_RESOURCES),
            "startupProbe": {"exec": {"command": probe}, "periodSeconds": 1,
                             "timeoutSeconds": 5, "failureThreshold": 60},
            "securityContext": container_security_context(),
            "volumeMounts": [{"name": "api-token", "mountPath": TOKEN_DIR, "readOnly": True},
                             dict(plan_mount), home_mount]}


def proxy_volumes() -> list[dict[str, Any]]:
    """The sidecar's volumes: the projected token (what the kubelet would automount, mounted
    here into the sidecar only) and its HOME."""
    token = {"name": "api-token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_EXPIRY_S}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt",
                                                              "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}
    home, _ = scratch_volume("proxy-home", _PROXY_HOME, "64Mi")
    return [token, home]


def object_meta(name: str, label: str, namespace: str | None) -> dict[str, Any]:
    """An object's metadata: its name, its namespace when known, cloudopt's labels."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/name": label, "app.kubernetes.io/managed-by": "cloudopt"}
    return meta


def admission_variables(name: str) -> list[dict[str, str]]:
    """The policies' ``variables``: the training container after (``new``) and before
    (``old``) the resize; the job container is named as the live Job names it."""
    label = json.dumps(dns_label(name))
    return [{"name": "new", "expression": f"object.spec.containers.filter(c, c.name == {label})"},
            {"name": "old",
             "expression": f"oldObject.spec.containers.filter(c, c.name == {label})"}]


def admission_expressions(name: str, namespace: str | None = None
                          ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The policy's ``matchConditions`` (which requests it judges: this account's) and
    ``validations`` (what it admits: the caller's own pod, in the account's namespace, and of
    it the training container's cpu and memory requests only).

    With no namespace the account is matched by name in any namespace, and the first
    validation ties the target's namespace to the account's (a pod's token is always its own
    namespace's account)."""
    account = service_account_name(name)
    if namespace:
        user = json.dumps(f"system:serviceaccount:{namespace}:{account}")
        match = f"request.userInfo.username == {user}"
    else:
        match = ('request.userInfo.username.startsWith("system:serviceaccount:") && '
                 f"request.userInfo.username.endsWith({json.dumps(':' + account)})")
    extra, key = "request.userInfo.extra", json.dumps(POD_NAME_EXTRA)
    label = json.dumps(dns_label(name))
    new, old = "variables.new[0].resources", "variables.old[0].resources"
    validations = [
        {"expression": 'request.userInfo.username == "system:serviceaccount:" + '
                       f"request.namespace + {json.dumps(':' + account)}",
         "message": f"{account} may resize pods of its own namespace only",
         "reason": "Forbidden"},
        # The key is absent from a token not bound to a pod (kubectl create token): refused.
        {"expression": f"{key} in {extra} && {extra}[{key}] == [request.name]",
         "message": f"{account} may resize only the pod its token was issued to",
         "reason": "Forbidden"},
        # The sidecar holds the token: grown, it could be used to starve the node.
        {"expression": "(has(object.spec.initContainers) ? object.spec.initContainers : []) "
                       "== (has(oldObject.spec.initContainers) ? "
                       "oldObject.spec.initContainers : [])",
         "message": f"{account} may not resize the {PROXY_NAME} sidecar", "reason": "Forbidden"},
        {"expression": f"object.spec.containers.all(c, c.name == {label} || "
                       "oldObject.spec.containers.exists(o, o == c))",
         "message": f"{account} may resize only the container {dns_label(name)}",
         "reason": "Forbidden"},
        # Limits are fixed at the plan's largest stage: a resize moves requests under them.
        {"expression": f"size(variables.new) == 1 && size(variables.old) == 1 && "
                       f"(has({new}.limits) ? {new}.limits : {{}}) == "
                       f"(has({old}.limits) ? {old}.limits : {{}})",
         "message": f"{account} may not change the container's limits", "reason": "Forbidden"},
        {"expression": f"{new}.requests.all(k, k in ['cpu', 'memory'] || "
                       f"(k in {old}.requests && {old}.requests[k] == {new}.requests[k])) && "
                       f"{old}.requests.all(k, k in {new}.requests)",
         "message": f"{account} may change only the cpu and memory requests",
         "reason": "Forbidden"}]
    return [{"name": "the-job-service-account", "expression": match}], validations


def bounds_expressions() -> list[dict[str, str]]:
    """The bounds policy's ``validations``: the training container's cpu and memory requests
    within the parameter's ``cpuMin``..``cpuMax`` and ``memoryMin``..``memoryMax`` (a plan
    that names no memory: the memory request unchanged)."""
    new, old = "variables.new[0].resources.requests", "variables.old[0].resources.requests"

    def within(key: str, lo: str, hi: str) -> str:
        q = f"quantity({new}.{key})"
        return (f"{q}.compareTo(quantity(params.data.{lo})) >= 0 && "
                f"{q}.compareTo(quantity(params.data.{hi})) <= 0")

    memory = (f"'memoryMin' in params.data ? ('memory' in {new} && "
              f"{within('memory', 'memoryMin', 'memoryMax')}) : "
              f"(('memory' in {new}) == ('memory' in {old}) && "
              f"(!('memory' in {new}) || {new}.memory == {old}.memory))")
    return [{"expression": f"size(variables.new) == 1 && 'cpu' in {new} && "
                           + within("cpu", "cpuMin", "cpuMax"),
             "messageExpression": "'cpu request outside the live plan: ' + params.data.cpuMin"
                                  " + ' to ' + params.data.cpuMax",
             "reason": "Forbidden"},
            {"expression": f"size(variables.new) == 1 && ({memory})",
             "message": "memory request outside the live plan's bounds", "reason": "Forbidden"}]


def bounds_name(name: str, namespace: str | None = None, *, policy: bool = False) -> str:
    """The bounds' ConfigMap (in the job's namespace), or with ``policy`` the bounds policy
    and its binding (cluster-scoped: the namespace, when known, keeps two apart)."""
    base = f"{service_account_name(name)}-plan-bounds"
    return f"{base}.{namespace}" if policy and namespace else base


def bounds_params(name: str, bounds: Mapping[str, str],
                  namespace: str | None = None) -> dict[str, Any]:
    """The ConfigMap the bounds policy reads: ``bounds`` (``cpuMin``, ``cpuMax`` and, where
    the plan names memory, ``memoryMin``, ``memoryMax``: quantities)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": object_meta(bounds_name(name), dns_label(name), namespace),
            "data": {k: str(v) for k, v in bounds.items()}}


def _admission_objects(name: str, label: str, namespace: str | None) -> list[dict[str, Any]]:
    policy, bounds = policy_name(name, namespace), bounds_name(name, namespace, policy=True)
    conditions, validations = admission_expressions(name, namespace)
    # Admission sees a PATCH as an UPDATE: the operations enum has no PATCH.
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
            "resources": ["pods/resize"], "scope": "Namespaced"}
    selector = ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
                if namespace else {})
    out = []
    for object_name, params, checks in ((policy, None, validations),
                                        (bounds, bounds_name(name), bounds_expressions())):
        spec: dict[str, Any] = {"failurePolicy": "Fail",
                                "matchConstraints": {"resourceRules": [dict(rule)]},
                                "matchConditions": conditions,
                                "variables": admission_variables(name), "validations": checks}
        binding: dict[str, Any] = {"policyName": object_name, "validationActions": ["Deny"]}
        if params:
            spec["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
            # No namespace: the parameter of the request's own namespace. Not found: this
            # namespace runs no such job, and the bounds are not its to judge (Deny would
            # refuse every pod resize there, whoever asked: params are read before the
            # match conditions).
            binding["paramRef"] = {"name": params, "parameterNotFoundAction": "Allow"}
        if selector:
            binding["matchResources"] = selector
        out += [{"apiVersion": _ADMISSION, "kind": "ValidatingAdmissionPolicy",
                 "metadata": object_meta(object_name, label, None), "spec": spec},
                {"apiVersion": _ADMISSION, "kind": "ValidatingAdmissionPolicyBinding",
                 "metadata": object_meta(object_name, label, None), "spec": binding}]
    return out


def access_objects(name: str, *, bounds: Mapping[str, str],
                   namespace: str | None = None) -> list[dict[str, Any]]:
    """The ServiceAccount, Role, RoleBinding, the bounds' ConfigMap (``bounds``: see
    :func:`bounds_params`), and the two ValidatingAdmissionPolicies with their bindings."""
    label, account = dns_label(name), service_account_name(name)
    subject: dict[str, Any] = {"kind": "ServiceAccount", "name": account}
    if namespace:
        subject["namespace"] = namespace
    rules = [
        # patch: the resize itself; get: kubectl patch reads the subresource first.
        {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["get", "patch"]},
        # The resizer reads its pod's requests and resize status (kubectl get pod).
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    return [
        # No token for a pod that names this account without mounting one itself.
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": object_meta(account, label, namespace),
         "automountServiceAccountToken": False},
        {"apiVersion": f"{_RBAC}/v1", "kind": "Role",
         "metadata": object_meta(account, label, namespace), "rules": rules},
        {"apiVersion": f"{_RBAC}/v1", "kind": "RoleBinding",
         "metadata": object_meta(account, label, namespace), "subjects": [subject],
         "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": account}},
        bounds_params(name, bounds, namespace),
        *_admission_objects(name, label, namespace)]


def access_header(name: str, namespace: str | None = None) -> list[str]:
    """The comment at the top of ``k8s-live-rbac.yaml``: what each object allows."""
    account, policy = service_account_name(name), policy_name(name, namespace)
    where = f"namespace {namespace}" if namespace else "the namespace it is applied to"
    enforced = f" in namespace {namespace}" if namespace else ""
    intro = ("What the live job's pod may do through the API, object by object. Apply as a "
             "cluster admin: the admission policy and its binding are cluster-scoped. Needs "
             "Kubernetes >= 1.33 (pods/resize, native sidecars).")
    objects = [
        f"ServiceAccount {account}: the pod runs as it. Its token is mounted only into the "
        f"{PROXY_NAME} sidecar (kubectl proxy), never into the container running the script; "
        "the proxy forwards only this pod's own paths and the discovery documents, so code "
        "in the job can read and resize its own pod and nothing else.",
        f"Role {account}: get and patch pods/resize, get pods, in {where} only. RBAC cannot "
        "name a Job's generated pod, so on its own it reaches every pod there.",
        f"RoleBinding {account}: gives the Role to the ServiceAccount; nothing more.",
        f"ValidatingAdmissionPolicy {policy}: a pods/resize update by the ServiceAccount is "
        "admitted only when the target is the pod its token was issued to (user-info extra "
        f"{POD_NAME_EXTRA} == the pod's name) in the account's namespace, and only when it "
        f"changes the cpu and memory requests of the container {dns_label(name)} alone (no "
        f"limit, no other resource, never the {PROXY_NAME} sidecar); a neighbour's resize, "
        "or one with a token not bound to a pod, is refused.",
        f"ConfigMap {bounds_name(name)}: the smallest and largest cpu and memory request the "
        "live plan asks for, read by the next policy in this namespace.",
        f"ValidatingAdmissionPolicy {bounds_name(name, namespace, policy=True)}: those "
        "requests stay within the ConfigMap's bounds (its binding reads the ConfigMap of each "
        "request's namespace, so jobs of one name in two namespaces keep their own bounds).",
        f"ValidatingAdmissionPolicyBindings {policy} and "
        f"{bounds_name(name, namespace, policy=True)}: enforce them "
        f"(Deny){enforced}."]
    outro = ("Reads are not admission requests: the get on pods is held to the own pod by the "
             "proxy alone (whoever held the token could read every pod spec of the "
             "namespace).")
    lines = textwrap.wrap(intro, 94)
    for text in objects:
        lines += textwrap.wrap(text, 94, initial_indent="  ", subsequent_indent="    ",
                               break_on_hyphens=False)
    lines += textwrap.wrap(outro, 94)
    return [f"# {ln}" for ln in lines]


__all__ = ["POD_NAME_EXTRA", "PROXY_NAME", "PROXY_PORT", "PROXY_URL", "TOKEN_DIR",
           "accept_paths", "access_header", "access_objects", "admission_expressions",
           "admission_variables", "bounds_expressions", "bounds_name", "bounds_params",
           "object_meta", "policy_name", "proxy_kubeconfig", "proxy_sidecar", "proxy_volumes",
           "service_account_name"]

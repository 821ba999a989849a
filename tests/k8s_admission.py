"""A ValidatingAdmissionPolicy evaluated the way the API server applies it, under cel-python:
``variables`` first, then ``matchConditions`` (all true, or the policy does not judge the
request), then every ``validation`` (any false or any CEL error refuses: the policies'
``failurePolicy`` is Fail). Kubernetes' ``quantity()`` library is given to CEL here, as the
API server's CEL environment has it (``quantity(s).compareTo(quantity(t))``)."""

from __future__ import annotations

import copy
from typing import Any

from conftest import need

from optimizer.trials.live.pod_spec import parse_quantity


def _functions(celtypes: Any) -> dict[str, Any]:
    def quantity(text: Any) -> Any:
        return celtypes.DoubleType(parse_quantity(str(text)))

    def compare_to(a: Any, b: Any) -> Any:
        return celtypes.IntType((float(a) > float(b)) - (float(a) < float(b)))

    return {"quantity": quantity, "compareTo": compare_to}


def decide(policy: dict, request: dict, *, obj: dict | None = None, old: dict | None = None,
           params: dict | None = None) -> str:
    """``skipped`` (a match condition false), ``admitted`` or ``refused``."""
    celpy = need("celpy")
    from celpy import celtypes

    env, functions = celpy.Environment(), _functions(celtypes)
    activation: dict[str, Any] = {"request": celpy.json_to_cel(request),
                                  "object": celpy.json_to_cel(obj or {}),
                                  "oldObject": celpy.json_to_cel(old or {}),
                                  "params": celpy.json_to_cel(params or {})}

    def run(expression: str) -> Any:
        return env.program(env.compile(expression), functions=functions).evaluate(activation)

    variables = {}
    for v in policy["spec"].get("variables") or []:
        try:
            variables[celtypes.StringType(v["name"])] = run(v["expression"])
        except celpy.CELEvalError:
            continue  # an unset variable fails the expressions that read it
        activation["variables"] = celtypes.MapType(variables)
    activation.setdefault("variables", celtypes.MapType(variables))

    def true(expression: str) -> bool:
        try:
            result = run(expression)
        except celpy.CELEvalError:
            return False
        return not isinstance(result, Exception) and bool(result)

    if not all(true(c["expression"]) for c in policy["spec"].get("matchConditions") or []):
        return "skipped"
    return "admitted" if all(true(v["expression"]) for v in policy["spec"]["validations"]) \
        else "refused"


def resized(pod: dict, container: str, requests: dict | None = None,
            limits: dict | None = None) -> dict:
    """``pod`` with ``container``'s requests (and limits) updated as a resize would."""
    out = copy.deepcopy(pod)
    for c in out["spec"].get("containers", []) + out["spec"].get("initContainers", []):
        if c["name"] == container:
            c["resources"].setdefault("requests", {}).update(requests or {})
            if limits is not None:
                c["resources"]["limits"] = dict(limits)
    return out

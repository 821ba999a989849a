"""The agents' plans of a run folder, reused on ``--resume`` only while their inputs hold.

A round's plan (``rl/[round-K/]recommendation.json``) depends on the preference, the trials
the model was fitted to, the agents' budget and the configuration. Each is recorded beside the
plan (``inputs``); a resume that changed any of them retrains and says which.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import read_json
from optimizer.foundation.errors import CloudoptError


def plan_inputs(preference: Any, trial_ids: Sequence[str], agent_seconds: float,
                config: Any) -> dict[str, Any]:
    """What a plan was made from, in a form that compares equal when nothing changed."""
    settings = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    return {"preference": preference if isinstance(preference, str) else list(preference),
            "trials": sorted(trial_ids), "agent_seconds": float(agent_seconds),
            "config": digest.hexdigest()[:16]}


def reusable_plan(cache: Path, inputs: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The recorded plan when its inputs equal ``inputs``; else None and why it is redone
    (empty when there is none)."""
    if not cache.exists():
        return None, ""
    try:
        rec = read_json(cache)
    except CloudoptError as exc:
        return None, f"the recorded plan is unreadable ({exc})"
    old = rec.get("inputs") if isinstance(rec, dict) else None
    if not isinstance(old, dict):
        return None, "the recorded plan does not say what it was made from"
    changed = []
    if old.get("preference") != inputs["preference"]:
        changed.append(f"preference {old.get('preference')} -> {inputs['preference']}")
    if old.get("trials") != inputs["trials"]:
        added = sorted(set(inputs["trials"]) - set(old.get("trials") or []))
        changed.append(f"trials ({len(added)} new)" if added else "trials")
    if old.get("agent_seconds") != inputs["agent_seconds"]:
        changed.append(f"agent budget {old.get('agent_seconds'):g} s -> "
                       f"{inputs['agent_seconds']:g} s")
    if old.get("config") != inputs["config"]:
        changed.append("configuration")
    if changed:
        return None, "changed since the recorded plan: " + ", ".join(changed)
    return rec, ""


__all__ = ["plan_inputs", "reusable_plan"]

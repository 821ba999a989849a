"""Seeded, episode-bounded training gives what it gave before the agents were rewritten.

``tests/data/agents_fingerprint.json`` was recorded by ``tests/agents_fingerprint.py`` from the
agents as they were before issue 74 (``agents/train.py``, ``agents/recipes.py`` and the
registry's adapters); the same figures now come through the registry and the algorithms' own
files. On the machine that recorded them they match to the last bit (``python
tests/agents_fingerprint.py --check tests/data/agents_fingerprint.json`` compares the digests
too); here the floats are compared to a relative 1e-4, so that another CPU's rounding in torch's
kernels does not fail the test, and the greedy actions and the plan exactly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import agents_fingerprint

RECORD = Path(__file__).parent / "data" / "agents_fingerprint.json"


def _differences(recorded: Any, now: Any, where: str = "") -> list[str]:
    if isinstance(recorded, dict):
        if set(recorded) != set(now):
            return [f"{where}: keys {sorted(recorded)} != {sorted(now)}"]
        return [d for k in recorded if not k.endswith("digest")
                for d in _differences(recorded[k], now[k], f"{where}/{k}")]
    if isinstance(recorded, list):
        if len(recorded) != len(now):
            return [f"{where}: {len(recorded)} items != {len(now)}"]
        return [d for i, (a, b) in enumerate(zip(recorded, now, strict=True))
                for d in _differences(a, b, f"{where}[{i}]")]
    if isinstance(recorded, float) and isinstance(now, (int, float)):
        same = math.isclose(recorded, now, rel_tol=1e-4, abs_tol=1e-9)
        return [] if same else [f"{where}: {recorded!r} != {now!r}"]
    return [] if recorded == now else [f"{where}: {recorded!r} != {now!r}"]


def test_training_and_plans_are_as_recorded_before_the_rewrite():
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    now = json.loads(json.dumps(agents_fingerprint.fingerprint()))
    differences = _differences(recorded, now)
    assert not differences, "\n".join(differences[:20])


def test_the_comparison_would_see_a_change():
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    changed = json.loads(json.dumps(recorded))
    changed["registry"]["reinforce"]["weights"]["sums"][0][0] *= 1.001
    changed["plan"]["plans"]["morl"][0][0] += 1
    assert len(_differences(recorded, changed)) == 2

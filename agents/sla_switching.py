"""The multi-objective agent's reactions to SLAs: policy switching and adaptive critic resets.

- :func:`sla_policy`: a time SLA at risk hands the decision to the most time-focused policy
  (an unfinished job is worth nothing), otherwise a cost SLA at risk to the most cost-focused.
- :func:`reset_due`: after ``interval`` SLA-violating steps in a row a critic is re-initialised
  with some probability (the "adaptive reset" of the design, after Nikishin et al., 2022,
  "The Primacy Bias in Deep Reinforcement Learning"): a critic that keeps steering into
  violations may be stuck on what it learned first.

Both are pure rules over the agent's preference vectors and counters;
:class:`agents.morl.MultiObjectiveRLAgent` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from optimizer.foundation.preferences import OBJECTIVES


def focused_policy(preferences: np.ndarray, objective: str) -> int:
    """Index of the preference vector (rows of ``preferences``) weighting ``objective`` most."""
    return int(np.argmax(preferences[:, OBJECTIVES.index(objective)]))


def sla_policy(
    preferences: np.ndarray, preferred: int, sla_status: Mapping[str, bool] | None
) -> int:
    """The policy to act with: ``preferred`` unless an SLA is at risk.

    ``sla_status`` maps an SLA name (``"time"``, ``"cost"``, ...) to ``True`` when it is met
    and on track, ``False`` when it is violated or about to be.
    """
    status = dict(sla_status or {})
    if "time" in status and not status["time"]:
        return focused_policy(preferences, "time")
    if "cost" in status and not status["cost"]:
        return focused_policy(preferences, "cost")
    return preferred


def reset_due(
    streak: int, violated: bool, interval: int, probability: float, rng: np.random.Generator
) -> tuple[int, bool]:
    """Advance a streak of SLA-violating steps; returns ``(new streak, reset the critic?)``.

    Once ``interval`` violating steps in a row are seen the streak restarts and the reset
    happens with ``probability`` (one draw from ``rng``; none before the streak is complete).
    """
    streak = streak + 1 if violated else 0
    if streak < interval:
        return streak, False
    return 0, bool(rng.random() < probability)

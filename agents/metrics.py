"""``RLMetricsTracker``: collects what happens during RL optimisation, for plots and reports.

Four tables, one CSV each, written atomically by :meth:`RLMetricsTracker.save_all_metrics`:

- ``allocation_history.csv``: one row per resource adjustment (step, action, description,
  allocation before and after, reward) - with its reward components in
  ``reward_components.csv`` and the SLA status in ``sla_metrics.csv``;
- ``performance_metrics.csv``: free-form rows of training/evaluation figures (throughput,
  cost, returns, training time, ...);
- ``pareto_front.csv``: outcomes added with :meth:`add_pareto_front`, with the ``on_front``
  flag and the hypervolume against the stated reference point (:mod:`agents.pareto`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from agents.pareto import OBJECTIVE_COLUMNS, hypervolume, pareto_front
from optimizer.foundation.atomic_files import atomic_write_csv


class RLMetricsTracker:
    """Accumulates adjustment, performance and Pareto-front records for one run.

    Parameters
    ----------
    output_dir : path
        Where :meth:`save_all_metrics` writes its CSV files (created when saving).
    """

    def __init__(self, output_dir: str | os.PathLike) -> None:
        self.output_dir = Path(output_dir)
        self._allocations: list[dict[str, Any]] = []
        self._rewards: list[dict[str, Any]] = []
        self._sla: list[dict[str, Any]] = []
        self._performance: list[dict[str, Any]] = []
        self._pareto: list[pd.DataFrame] = []

    def add_adjustment_metrics(
        self,
        step: int,
        action: int,
        old_allocation: Sequence[float],
        new_allocation: Sequence[float],
        reward: float,
        reward_components: Mapping[str, float] | None = None,
        sla_status: Mapping[str, bool] | None = None,
        description: str = "",
        policy: str = "",
        uncertainty: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one resource adjustment (allocations as (gpus, cpus, memory_gb, batch));
        ``extra`` adds columns to its allocation-history row (phase, effect, confidence...)."""
        keys = ("gpus", "cpus", "memory_gb", "batch_size")
        row: dict[str, Any] = {
            "time": time.time(),
            "step": int(step),
            "action": int(action),
            "description": description,
            "policy": policy,
            "reward": float(reward),
            "uncertainty": uncertainty,
        }
        row.update({f"old_{k}": v for k, v in zip(keys, old_allocation, strict=False)})
        row.update({f"new_{k}": v for k, v in zip(keys, new_allocation, strict=False)})
        row.update(dict(extra or {}))
        self._allocations.append(row)
        self._rewards.append({"step": int(step), **dict(reward_components or {})})
        self._sla.append({"step": int(step), **{k: bool(v) for k, v in (sla_status or {}).items()}})

    def add_sla_status(self, source: str, status: Mapping[str, bool]) -> None:
        """Whether each SLA was met by a measured run (``source`` names it: ``baseline``...)."""
        self._sla.append({"source": source, **{k: bool(v) for k, v in status.items()},
                          "all_met": all(status.values())})

    def add_performance_metrics(self, **metrics: Any) -> None:
        """Record one row of performance figures, e.g. ``throughput=..., cost=...``."""
        self._performance.append({"time": time.time(), **metrics})

    def add_pareto_front(
        self, outcomes: pd.DataFrame, reference: Sequence[float], label: str = ""
    ) -> float:
        """Add (cost, time, resource) outcomes; returns the hypervolume of their front."""
        front = pareto_front(outcomes, OBJECTIVE_COLUMNS)
        hv = hypervolume(front[list(OBJECTIVE_COLUMNS)].to_numpy(dtype=float), reference)
        front = front.assign(front_label=label, hypervolume=hv)
        for col, r in zip(OBJECTIVE_COLUMNS, reference, strict=True):
            front[f"reference_{col}"] = float(r)
        self._pareto.append(front)
        return hv

    @property
    def allocation_history(self) -> pd.DataFrame:
        return pd.DataFrame(self._allocations)

    @property
    def reward_components(self) -> pd.DataFrame:
        return pd.DataFrame(self._rewards)

    @property
    def sla_metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self._sla)

    @property
    def performance_metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self._performance)

    @property
    def pareto_front(self) -> pd.DataFrame:
        return pd.concat(self._pareto, ignore_index=True) if self._pareto else pd.DataFrame()

    def save_all_metrics(self) -> dict[str, Path]:
        """Write every non-empty table to ``output_dir`` as CSV (atomically); returns the paths."""
        tables = {
            "allocation_history": self.allocation_history,
            "reward_components": self.reward_components,
            "sla_metrics": self.sla_metrics,
            "performance_metrics": self.performance_metrics,
            "pareto_front": self.pareto_front,
        }
        written: dict[str, Path] = {}
        for name, frame in tables.items():
            if len(frame):
                path = self.output_dir / f"{name}.csv"
                atomic_write_csv(path, frame)
                written[name] = path
        return written

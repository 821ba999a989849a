"""``RLMetricsTracker``: every decision and measurement of an optimization, as CSV tables.

Five tables, one CSV each in ``output_dir`` (written atomically by :meth:`save_all_metrics`):

- ``allocation_history.csv``: one row per RL adjustment (step, phase, action and its
  description, allocation before and after, reward, uncertainty);
- ``reward_components.csv``: the reward vector of each adjustment (cost, time, efficiency, SLA);
- ``sla_metrics.csv``: per adjustment or per run, whether each SLA was met;
- ``pareto_front.csv``: the cost/time trade-off points and which are Pareto-optimal;
- ``performance_metrics.csv``: measured runs (baseline trials, the optimized run) with time,
  throughput, cost and utilisation, and whether each figure was measured or predicted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.records import atomic_write_csv

TABLES = ("allocation_history", "reward_components", "sla_metrics", "pareto_front",
          "performance_metrics")


class RLMetricsTracker:
    """Collects rows for the five tables; :meth:`save_all_metrics` writes them."""

    def __init__(self, output_dir: str | os.PathLike) -> None:
        self.output_dir = Path(output_dir)
        self._rows: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}

    def _frame(self, name: str) -> pd.DataFrame:
        return pd.DataFrame(self._rows[name])

    @property
    def allocation_history(self) -> pd.DataFrame:
        return self._frame("allocation_history")

    @property
    def reward_components(self) -> pd.DataFrame:
        return self._frame("reward_components")

    @property
    def sla_metrics(self) -> pd.DataFrame:
        return self._frame("sla_metrics")

    @property
    def pareto_front(self) -> pd.DataFrame:
        return self._frame("pareto_front")

    @property
    def performance_metrics(self) -> pd.DataFrame:
        return self._frame("performance_metrics")

    def add_adjustment_metrics(self, decision: Mapping[str, Any], policy: str = "") -> None:
        """One RL adjustment: a row of :attr:`optimizer.recommend.Recommendation.decisions`."""
        d = dict(decision)
        step = d.get("step")
        self._rows["allocation_history"].append({
            "policy": policy, "step": step, "phase": d.get("phase"), "action": d.get("action"),
            "description": d.get("description"), "effect": d.get("effect"),
            "gpus": d.get("gpus"), "cpus": d.get("cpus"),
            "memory_gb": d.get("memory_gb"), "batch_size": d.get("batch_size"),
            "changed": d.get("changed"), "reward": d.get("reward"),
            "confidence": d.get("confidence"), "uncertainty": d.get("uncertainty")})
        self._rows["reward_components"].append({
            "policy": policy, "step": step, "cost": d.get("r_cost"), "time": d.get("r_time"),
            "efficiency": d.get("r_efficiency"), "sla": d.get("r_sla"),
            "reward": d.get("reward")})
        self._rows["sla_metrics"].append({
            "source": f"plan:{policy}", "step": step, "elapsed_s": d.get("elapsed_s"),
            "spent": d.get("spent"), "sla_component": d.get("r_sla"),
            "all_met": d.get("r_sla") is not None and d.get("r_sla") >= 0, "oom": d.get("oom")})

    def add_sla_status(self, source: str, status: Mapping[str, bool]) -> None:
        """Whether each SLA was met by a measured run (``source`` names the run)."""
        self._rows["sla_metrics"].append({"source": source, **{f"{k}_met": bool(v)
                                                               for k, v in status.items()},
                                          "all_met": all(status.values())})

    def add_performance_metrics(self, metrics: Mapping[str, Any]) -> None:
        self._rows["performance_metrics"].append(dict(metrics))

    def add_pareto_front(self, front: pd.DataFrame | list[Mapping[str, Any]]) -> None:
        rows = front.to_dict("records") if isinstance(front, pd.DataFrame) else list(front)
        self._rows["pareto_front"].extend(dict(r) for r in rows)

    def save_all_metrics(self) -> dict[str, Path]:
        """Write every table as ``<name>.csv`` (empty tables too, with no rows)."""
        paths = {}
        for name in TABLES:
            path = self.output_dir / f"{name}.csv"
            atomic_write_csv(path, self._frame(name))
            paths[name] = path
        return paths

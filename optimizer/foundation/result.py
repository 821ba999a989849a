"""What the main job answers, as data every room reads: :class:`Recommendation` and
:class:`RunResult`.

The search builds the :class:`Recommendation` (the best *measured* setting, who proposed it, how
the closed loop and the run-off went, the last round's plan); the pipeline adds the runs it is
measured against into a :class:`RunResult`; the report, ``recommendation.json`` and the
Kubernetes writers read that one object, last. ``recommendation.json`` is its serialisation
(:meth:`RunResult.to_json`, read back by :meth:`RunResult.from_json`, as ``--resume`` does),
stamped with :data:`SCHEMA_VERSION`.

The sections each have their own report section and stay JSON objects (``goodput``,
``memory``, ``measured``, ``search``, ``job_length``, ``learning_rate``, ``live``, ``scaling``,
``history``, the rounds' and the run-off's rows): they are held as JSON gives them back, so a
result read from its file equals the one written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import to_json
from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.job import Preference

SCHEMA_VERSION = 1
"""The format of ``recommendation.json``; a file of a later version is refused, not misread."""

JSONObject = dict[str, Any]


def plain(value: Any) -> Any:
    """``value`` as JSON gives it back (allocations as objects, tuples as lists, numpy scalars
    as numbers, non-finite numbers as None)."""
    return json.loads(to_json(value))


def _allocation(value: Allocation | Mapping[str, Any] | None) -> Allocation | None:
    if value is None or isinstance(value, Allocation):
        return value
    return Allocation(**value)


@dataclass
class Recommendation:
    """The search's answer: the allocation to run (the best measured trial's, memory
    right-sized), who proposed it (``agent``), the trial it comes from, every round's decision,
    the sections the report shows, the notes, and the last round's plan (``planned_*``,
    ``initial``, ``outcomes``, ``predicted``, ``sla_feasible``, ``fit``)."""

    allocation: Allocation
    agent: str
    final_trial: str
    choice: str
    rounds: list[JSONObject] = field(default_factory=list)
    goodput: JSONObject = field(default_factory=dict)
    job_length: JSONObject | None = None
    learning_rate: JSONObject | None = None
    memory: JSONObject = field(default_factory=dict)
    measured: JSONObject = field(default_factory=dict)
    search: JSONObject = field(default_factory=dict)
    runoff: list[str] = field(default_factory=list)
    runoff_standings: list[JSONObject] = field(default_factory=list)
    history: JSONObject | None = None
    """With ``--history``: the specs, the earlier runs used as prior measurements and those left
    out, and why (None: a search from scratch)."""
    live: JSONObject | None = None
    scaling: JSONObject | None = None
    notes: list[str] = field(default_factory=list)
    planned_allocation: Allocation | None = None
    """The last round's plan (None: no round planned)."""
    initial: Allocation | None = None
    """Where the plan starts (the model's best static allocation)."""
    planned_adjustments: list[JSONObject] = field(default_factory=list)
    outcomes: list[JSONObject] = field(default_factory=list)
    """Each policy's outcome on the noise-free model (the agents, best-static, optimal)."""
    predicted: JSONObject = field(default_factory=dict)
    """The plan's totals as the workload model predicts them."""
    sla_feasible: bool | None = None
    fit: JSONObject | None = None
    sla_source: str | None = None
    """Where the SLA limits came from (the configuration, or the baseline's forecast)."""

    def __post_init__(self) -> None:
        self.allocation = _allocation(self.allocation)
        self.planned_allocation = _allocation(self.planned_allocation)
        self.initial = _allocation(self.initial)
        for name in ("rounds", "goodput", "job_length", "learning_rate", "memory", "measured",
                     "search", "runoff_standings", "history", "live", "scaling",
                     "planned_adjustments", "outcomes", "predicted", "fit"):
            setattr(self, name, plain(vars(self)[name]))

    @classmethod
    def from_plan(cls, plan: Mapping[str, Any], **choice: Any) -> Recommendation:
        """The choice (``choice``: the fields besides the plan's) beside the last round's
        ``plan`` as recorded (``rl/[round-K/]recommendation.json``; empty: none)."""
        return cls(planned_allocation=plan.get("allocation"), initial=plan.get("initial"),
                   planned_adjustments=list(plan.get("planned_adjustments", [])),
                   outcomes=list(plan.get("outcomes", [])),
                   predicted=dict(plan.get("predicted", {})),
                   sla_feasible=plan.get("sla_feasible"), fit=plan.get("fit"), **choice)

    def outcome(self, name: str) -> JSONObject | None:
        """The outcome of the policy ``name`` (None: it did not run)."""
        return next((o for o in self.outcomes if o["name"] == name), None)

    def job_time_s(self) -> float | None:
        """The whole job's seconds claimed for the recommended command: measured where a
        whole run or the run-off timed it, else the plan's prediction (None: neither)."""
        for value in (self.measured.get("job_time_s"), self.predicted.get("time_s")):
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                return float(value)
        return None


@dataclass
class RunResult:
    """The recommendation and the runs it is measured against: the reference trial's figures
    and the recommended run's (each with whether it met the SLA), their comparison, the
    preference they were judged by. ``recommendation.json`` is :meth:`to_json`."""

    preference: Preference
    recommendation: Recommendation
    baseline: JSONObject
    optimized: JSONObject | None = None
    comparison: JSONObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.preference, list):  # weights, as JSON gives them back
            self.preference = tuple(float(w) for w in self.preference)
        self.baseline, self.optimized = plain(self.baseline), plain(self.optimized)
        self.comparison = plain(self.comparison)

    @property
    def sla_status(self) -> dict[str, dict[str, bool]]:
        """Per run (``baseline``, ``optimized``): whether each SLA was met."""
        out = {"baseline": self.baseline.get("sla")}
        if self.optimized is not None and self.optimized.get("sla") is not None:
            out["optimized"] = self.optimized["sla"]
        return {k: v for k, v in out.items() if v is not None}

    def predicted_vs_measured(self) -> JSONObject:
        """The plan's predicted throughput, time and cost beside the recommended run's."""
        pred, run = self.recommendation.predicted, self.optimized
        time_is = None if run is None else (
            "measured" if run["status"] == "completed" else "predicted from measured throughput")
        return {"throughput": {"predicted": pred.get("throughput"),
                               "measured": None if run is None else run["throughput"]},
                "job_time_s": {"predicted": pred.get("time_s"),
                               "measured": None if run is None else run["job_time_s"],
                               "measured_is": time_is},
                "job_cost": {"predicted": pred.get("cost"),
                             "measured": None if run is None else run["job_cost"]}}

    def to_json(self) -> JSONObject:
        """``recommendation.json``: its keys in the order users and tests have read them."""
        rec = self.recommendation
        chosen = rec.outcome(rec.agent)
        return {
            "schema_version": SCHEMA_VERSION, "preference": self.preference,
            "agent": rec.agent,
            "share_of_optimum": chosen["share_of_optimum"] if chosen else None,
            "baseline": self.baseline, "optimized": self.optimized,
            "predicted_vs_measured": self.predicted_vs_measured(),
            "allocation": rec.allocation, "initial": rec.initial,
            "planned_adjustments": rec.planned_adjustments, "policies": rec.outcomes,
            "sla_feasible": rec.sla_feasible, "sla_source": rec.sla_source,
            "comparison": self.comparison, "workload_fit": rec.fit, "choice": rec.choice,
            "final_trial": rec.final_trial, "runoff": rec.runoff,
            "runoff_standings": rec.runoff_standings, "history": rec.history,
            "memory": rec.memory,
            "search": rec.search, "goodput": rec.goodput, "learning_rate": rec.learning_rate,
            "job_length": rec.job_length, "measured": rec.measured, "live": rec.live,
            "scaling": rec.scaling, "planned_allocation": rec.planned_allocation,
            "rounds": rec.rounds, "notes": rec.notes, "predicted": rec.predicted,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any], source: str = "recommendation.json") -> RunResult:
        """The result ``body`` (:meth:`to_json`'s form) holds.

        Raises
        ------
        CloudoptError
            A file of another schema version, or one that is not a result, naming ``source``.
        """
        version = body.get("schema_version") if isinstance(body, Mapping) else None
        if version != SCHEMA_VERSION:
            raise CloudoptError(f"{source}: schema_version {version!r}, this cloudopt reads "
                                f"{SCHEMA_VERSION} (written by another version?)")
        try:
            rec = Recommendation(
                allocation=body["allocation"], agent=body["agent"],
                final_trial=body["final_trial"], choice=body["choice"],
                rounds=body["rounds"], goodput=body["goodput"], job_length=body["job_length"],
                learning_rate=body["learning_rate"], memory=body["memory"],
                measured=body["measured"], search=body["search"], runoff=body["runoff"],
                runoff_standings=body["runoff_standings"], history=body["history"],
                live=body["live"],
                scaling=body["scaling"], notes=body["notes"],
                planned_allocation=body["planned_allocation"], initial=body["initial"],
                planned_adjustments=body["planned_adjustments"], outcomes=body["policies"],
                predicted=body["predicted"], sla_feasible=body["sla_feasible"],
                fit=body["workload_fit"], sla_source=body["sla_source"])
            return cls(body["preference"], rec, body["baseline"], body["optimized"],
                       body["comparison"])
        except (KeyError, TypeError) as exc:
            raise CloudoptError(f"{source}: not a cloudopt result ({type(exc).__name__}: "
                                f"{exc})") from None


__all__ = ["SCHEMA_VERSION", "Recommendation", "RunResult", "plain"]

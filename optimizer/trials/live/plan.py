"""A live plan: the allocation to hold in each phase of a running job.

The controller (:mod:`optimizer.trials.live.controller`) looks the job's current phase up in
the plan and moves the job there. Phases are named by where they were seen:

* the probe's stages, the fast path: ``startup`` (before the first optimizer step: imports,
  data preparation), ``train``, ``eval`` (a module switched to eval mode), ``save``
  (``torch.save``) and ``pause`` (training mode, but no optimizer step for a while: a
  checkpoint written some other way, logging, the end of the job);
* ``phase-N``: label ``N`` of the phase detector on the monitor's windows, the slow path for a
  job the probe cannot see into.

A phase the plan does not name keeps the ``fallback`` allocation (the best static one), so a
plan whose phases never appear leaves the job as a static run. What cannot change while a
script runs (GPUs, data-loader workers, the batch size) is in ``static`` and is the same in
every phase.

Written as ``live-plan.json`` in the run folder; read back with :meth:`LivePlan.load`, which
names the file and the field of anything it cannot use.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.foundation.errors import ConfigError

PLAN_FILE = "live-plan.json"
PLAN_VERSION = 1
STAGES = ("startup", "train", "eval", "save", "pause")


@dataclass(frozen=True)
class PhaseAllocation:
    """What one phase holds: CPU cores (affinity and intra-op threads) and the memory limit."""

    cpus: int
    memory_gb: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.cpus, int) and self.cpus >= 1):
            raise ConfigError(f"cpus must be a whole number >= 1 (got {self.cpus!r})")
        if self.memory_gb is not None and not (math.isfinite(self.memory_gb)
                                               and self.memory_gb > 0):
            raise ConfigError(f"memory_gb must be > 0 (got {self.memory_gb!r})")


@dataclass
class PhaseEntry:
    """A phase of the plan: its allocation and what was expected of it."""

    allocation: PhaseAllocation
    share: float | None = None
    """Share of the job's time the phase took where it was measured (the phase schedule)."""
    why: str = ""


@dataclass
class LivePlan:
    """Per-phase allocations of one job, with the static allocation as fallback."""

    phases: dict[str, PhaseEntry]
    fallback: PhaseAllocation
    interval_s: float = 1.0
    """Seconds between the controller's decisions."""
    source: str = ""
    """Who decided it, in words (e.g. "reinforce, phase in its state")."""
    static: dict[str, Any] = field(default_factory=dict)
    """What stays as the job started: ``gpus``, ``batch_size``, ``workers``."""
    schedule: list[str] = field(default_factory=list)
    """The phases in the order a measured run went through them (repeats kept)."""
    memory_max_gb: float | None = None
    """The largest memory of any phase: a container's limit (its QoS class must not change)."""
    phase_source: str = "probe"
    """``probe`` (the probe's stages) or ``detector`` (the phase detector on the monitor's
    windows, phases named ``phase-N``)."""

    def allocation_for(self, phase: str | None) -> PhaseAllocation:
        """The allocation to hold in ``phase``; the fallback for an unknown or absent one."""
        entry = self.phases.get(phase) if phase is not None else None
        return entry.allocation if entry is not None else self.fallback

    def largest(self) -> PhaseAllocation:
        """What the job's container (or Ray task) must hold: the most cores of any phase, the
        fallback's included, and the most memory (``memory_max_gb`` or a phase's, where
        larger); memory None when no phase names one."""
        allocs = [self.fallback, *(e.allocation for e in self.phases.values())]
        memories = [m for m in [self.memory_max_gb, *(a.memory_gb for a in allocs)] if m]
        return PhaseAllocation(max(a.cpus for a in allocs),
                               max(memories) if memories else None)

    @property
    def is_static(self) -> bool:
        """True when every phase holds the fallback: nothing would change live."""
        return all(e.allocation == self.fallback for e in self.phases.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": PLAN_VERSION, "source": self.source, "interval_s": self.interval_s,
            "fallback": asdict(self.fallback), "static": self.static,
            "schedule": self.schedule, "memory_max_gb": self.memory_max_gb,
            "phase_source": self.phase_source,
            "phases": {k: {"allocation": asdict(e.allocation), "share": e.share, "why": e.why}
                       for k, e in self.phases.items()},
        }

    def save(self, run_dir: str | os.PathLike) -> Path:
        """Write ``live-plan.json`` into ``run_dir`` (atomically); returns its path."""
        path = Path(run_dir) / PLAN_FILE if Path(run_dir).is_dir() else Path(run_dir)
        atomic_write_json(path, self.to_dict())
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "the plan") -> LivePlan:
        def alloc(d: Any, name: str) -> PhaseAllocation:
            if not isinstance(d, dict) or "cpus" not in d:
                raise ConfigError(f"{where}: {name} must be an object with 'cpus' (got {d!r})")
            try:
                mem = d.get("memory_gb")
                return PhaseAllocation(int(d["cpus"]) if float(d["cpus"]).is_integer()
                                       else d["cpus"], None if mem is None else float(mem))
            except (TypeError, ValueError, ConfigError) as exc:
                raise ConfigError(f"{where}: {name}: {exc}") from None

        if not isinstance(data, dict):
            raise ConfigError(f"{where} is not a JSON object")
        version = data.get("version")
        if version != PLAN_VERSION:
            raise ConfigError(f"{where}: version {version!r} is not {PLAN_VERSION}, the one this "
                              "cloudopt reads")
        phases = data.get("phases")
        if not isinstance(phases, dict):
            raise ConfigError(f"{where}: 'phases' must be an object of phase name to allocation")
        entries = {}
        for name, e in phases.items():
            if not isinstance(e, dict):
                raise ConfigError(f"{where}: phases.{name} must be an object")
            entries[str(name)] = PhaseEntry(alloc(e.get("allocation"), f"phases.{name}"),
                                            e.get("share"), str(e.get("why", "")))
        interval = data.get("interval_s", 1.0)
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ConfigError(f"{where}: interval_s must be > 0 (got {interval!r})")
        return cls(phases=entries, fallback=alloc(data.get("fallback"), "fallback"),
                   interval_s=float(interval), source=str(data.get("source", "")),
                   static=dict(data.get("static") or {}),
                   schedule=[str(s) for s in data.get("schedule") or []],
                   memory_max_gb=data.get("memory_max_gb"),
                   phase_source=str(data.get("phase_source", "probe")))

    @classmethod
    def load(cls, path: str | os.PathLike) -> LivePlan:
        """The plan in ``path`` (a run folder or the JSON file itself)."""
        p = Path(path)
        if p.is_dir():
            p = p / PLAN_FILE
        if not p.is_file():
            raise ConfigError(f"{p}: no live plan here (a run of `python -m optimizer "
                              "--train-file …` writes live-plan.json in its run folder)")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ConfigError(f"{p}: not valid JSON ({exc})") from None
        return cls.from_dict(data, where=str(p))


__all__ = ["PLAN_FILE", "STAGES", "LivePlan", "PhaseAllocation", "PhaseEntry"]

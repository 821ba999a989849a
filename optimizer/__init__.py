"""cloudopt: find the cheapest or fastest way to run a deep-learning training job within its SLA.

The orchestrator, in rooms that follow the data flow of the main job (``ARCHITECTURE.md``):

- :mod:`optimizer.foundation`: configs, errors, allocations, atomic files, NVML; what every part
  of the project (``phases``, ``envs``, ``agents`` too) may import, and which imports none of them;
- :mod:`optimizer.trials`: running one monitored trial of a script and recording it;
- :mod:`optimizer.search`: which trials to run, the workload fit, the agents' plans, the choice;
- :mod:`optimizer.offline`: analysis of logs of earlier runs;
- :mod:`optimizer.reports`: the report, the recommendation's files, Kubernetes resources;
- :mod:`optimizer.commands`: one module per command of the command line.

The two doors stay at the top: :mod:`optimizer.cli` (``python -m optimizer``) and
:mod:`optimizer.pipeline` (:class:`CloudResourceOptimizer`, the main job).

The design's classes are importable from here (``from optimizer import TrainingModuleManager``).
They load on first use, so that a library importing :mod:`optimizer.foundation` does not pull in
the orchestrator (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "CloudResourceOptimizer": "optimizer.pipeline",
    "TrainingModuleManager": "optimizer.trials.training",
    "ResourceManager": "optimizer.trials.resources",
    "ResourceCostCalculator": "optimizer.trials.cost",
    "ProcessMonitor": "optimizer.trials.monitor",
    "OfflineDataAnalyzer": "optimizer.offline.analyzer",
    "OptimizerConfig": "optimizer.foundation.config",
    "load_config": "optimizer.foundation.config",
    "Allocation": "optimizer.foundation.allocation",
    "CloudoptError": "optimizer.foundation.errors",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'optimizer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__cloudopt_package__ = True  # checked, without importing, by optimizer.foundation.install_check

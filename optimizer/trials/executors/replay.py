"""``replay:DIR``: trials answered from recorded runs instead of run again.

A search's regret against the number of real runs needs hundreds of searches over the same
measured grid; running each trial again would take days. The replay executor answers a trial
from a grid measured once: ``DIR/cells/<key>/rep<k>/`` holds the files of whole runs of the
script at one setting (``summary.json``, ``trace.csv``, ``probe.jsonl``, ...; the layout that
``benchmarks/regret_truth.py`` writes under ``runs/regret/<machine>/<script>-<hash>``), with
``<key>`` = ``g<gpus>-c<cpus>-b<batch>`` and ``-w<workers>`` where workers were set.

A trial at a setting gets the next recorded run of that cell (``rep0``, ``rep1``, … in turn,
from ``rep<seed>`` with ``[run].seed``, so a setting measured twice is answered by two different
runs, as a real rerun would be, and searches with different seeds see different runs first). Its
files are copied into the trial folder and its summary relabelled: the trial's id, the
memory limit the search asked for (a recorded peak above it is an out-of-memory failure, as
the monitor would have killed it), the cost priced at that limit, ``executor = "replay"``.
What a replay cannot do: a time-boxed probe gets the whole recorded run (a replayed probe
knows the job's end), and a setting outside the grid is a failed trial that says so.

A trial that leaves the batch size or the workers unset runs the script's own: the values the
manager reads from the script's source, else ``DIR/grid.json``'s ``default_batch`` and
``default_workers`` (a script that computes its default in code, such as
``examples/train_mlp.py``'s ``$OPTIMIZER_BATCH_SIZE``-else-128, shows none in its source).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import read_json
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import CloudoptError, ConfigError
from optimizer.trials.cost import ResourceCostCalculator
from optimizer.trials.records import SUMMARY_FILE, TrialSummary
from optimizer.trials.run.request import TrialRequest

PREFIX = "replay:"
DEFAULTS_FILE = "grid.json"


def cell_key(a: Allocation, manager: Any = None, defaults: dict[str, Any] | None = None) -> str:
    """The recorded cell of an allocation (the grid's folder name); the script's own batch size
    and data-loader workers, as ``manager`` reads them or else as the grid's ``defaults``
    record them, where the allocation leaves them unset."""
    batch, workers, defaults = a.batch_size, a.workers, defaults or {}
    if manager is not None:
        batch = batch if batch is not None else manager.default_batch_size()
        workers = workers if workers is not None else manager.default_workers()
    batch = batch if batch is not None else defaults.get("default_batch")
    workers = workers if workers is not None else defaults.get("default_workers")
    w = "" if workers is None else f"-w{workers}"
    return f"g{a.gpus}-c{a.cpus}-b{batch}{w}"


class ReplayExecutor:
    """Answers each trial with a recorded run of its cell (see the module docstring)."""

    name = "replay"

    def __init__(self, root: str | Path, start: int = 0) -> None:
        self.root, self.start = Path(root), int(start)
        cells = self.root / "cells"
        if not cells.is_dir():
            raise ConfigError(f"--executor replay:{root}: no cells/ folder there (a grid "
                              "recorded by benchmarks/regret_truth.py, e.g. "
                              "runs/regret/<machine>/<script>-<hash>)")
        self.defaults: dict[str, Any] = {}
        if (self.root / DEFAULTS_FILE).is_file():
            try:
                self.defaults = dict(read_json(self.root / DEFAULTS_FILE))
            except (CloudoptError, ValueError, TypeError) as e:
                raise ConfigError(f"{self.root / DEFAULTS_FILE}: not a JSON object of the "
                                  f"script's default_batch and default_workers ({e})") from None
        self.served: Counter = Counter()

    def _runs(self, key: str) -> list[Path]:
        d = self.root / "cells" / key
        return sorted(p for p in d.glob("rep*") if (p / SUMMARY_FILE).is_file())

    def run(self, manager: Any, requests: Sequence[TrialRequest],
            resource_config: ResourceConfig) -> Iterator[tuple[int, TrialSummary]]:
        for i, req in enumerate(requests):
            yield i, self.replay(req, resource_config, manager)

    def replay(self, req: TrialRequest, resources: ResourceConfig,
               manager: Any = None) -> TrialSummary:
        trial_dir = Path(req.trial_dir)
        trial_dir.mkdir(parents=True, exist_ok=True)
        key = cell_key(req.allocation, manager, self.defaults)
        runs = self._runs(key)
        if not runs:
            summary = TrialSummary(trial_id=trial_dir.name, status="failed",
                                   allocation=req.allocation, reason="not-recorded",
                                   stderr_tail=f"no recorded run of {key} in {self.root}",
                                   executor=self.name)
            summary.save(trial_dir)
            return summary
        src = runs[(self.start + self.served[key]) % len(runs)]
        self.served[key] += 1
        for f in src.iterdir():
            if f.is_file() and f.name != SUMMARY_FILE:
                shutil.copy2(f, trial_dir / f.name)
        rec = TrialSummary.load(src)
        alloc = req.allocation  # the setting the search asked for (the recorded run is it)
        hourly = ResourceCostCalculator.from_config(resources).calculate_hourly_cost(alloc)
        out = dataclasses.replace(
            rec, trial_id=trial_dir.name, allocation=alloc, hourly_cost=hourly,
            cost=hourly * rec.wall_time_s / 3600, executor=self.name, node=str(src),
            predicted_total_cost=(hourly * rec.predicted_total_time_s / 3600
                                  if rec.predicted_total_time_s else None))
        if rec.mem_gb_peak > req.allocation.memory_gb:
            out = dataclasses.replace(out, status="failed", reason="oom",
                                      stderr_tail=f"recorded peak {rec.mem_gb_peak:.2f} GB is "
                                      f"over the {req.allocation.memory_gb:g} GB limit")
        if req.total_samples and not out.total_samples:
            out.total_samples = req.total_samples
        out.save(trial_dir)
        return out

    def map(self, fns: Sequence[Callable[[], Any]]) -> list[Any]:
        return [f() for f in fns]

    def close(self) -> None:
        pass


__all__ = ["DEFAULTS_FILE", "PREFIX", "ReplayExecutor", "cell_key"]

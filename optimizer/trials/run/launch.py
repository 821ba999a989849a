"""A trial's command line, environment and cores, and the record of them in ``config.json``.

:func:`trial_launch` turns a :class:`~optimizer.trials.launchers.plan.LaunchPlan` and a
:class:`~optimizer.trials.run.request.TrialRequest` into what the runner starts: the
allocation's variables (:func:`~optimizer.trials.runner.trial_environment`: threads, prices,
GPUs, the metrics file, the in-process probe), the batch size where the script reads it from
its environment, torchrun's variables and core split for a data-parallel trial, and the
cores it is pinned to. :func:`launch_record` is what ``config.json`` keeps of it: enough for
``--resume`` to tell whether a recorded trial still applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from optimizer.foundation.config import ResourceConfig
from optimizer.trials.launchers import torchrun
from optimizer.trials.launchers.plan import LaunchPlan
from optimizer.trials.probe import EVENTS_FILE
from optimizer.trials.resources import cpu_affinity_set
from optimizer.trials.run.request import TrialRequest
from optimizer.trials.runner import recorded_env, trial_environment


@dataclass(frozen=True)
class TrialLaunch:
    """What one trial's process is started with."""

    command: list[str]
    env: dict[str, str]
    cpus: list[int]
    """The cores the trial holds (a live trial may start on fewer of them)."""
    work: Path
    """The trial's work folder, where its files are written while it runs."""
    trial_id: str
    probe_events: Path | None
    """The in-process probe's event file (None: the probe is off)."""
    probe_batch: int | None
    """The batch a step of a loop without a DataLoader counts."""
    world: int
    """Data-parallel ranks whose samples the probe sums (1: a plain run)."""
    started_at: str
    """When it was launched, UTC, ISO 8601."""

    @property
    def metrics_path(self) -> Path:
        """Where the script writes rows for cloudopt (``OPTIMIZER_METRICS_CSV``)."""
        return self.work / "metrics.csv"


def trial_launch(plan: LaunchPlan, request: TrialRequest, resource_config: ResourceConfig,
                 work: Path) -> TrialLaunch:
    """The command line, environment and cores of ``request``'s trial, written into ``work``."""
    alloc = request.allocation
    probe_events = work / EVENTS_FILE if plan.in_process_probe else None
    env = trial_environment(alloc, resource_config, request.visible_devices,
                            work / "metrics.csv", request.name, probe_events)
    env.update(plan.batch_environment(alloc.batch_size))
    probe_batch = alloc.batch_size or plan.default_batch_size()
    if probe_events is not None and probe_batch:
        # a loop without a DataLoader shows the probe no batch: this one counts a step
        env["CLOUDOPT_PROBE_BATCH"] = str(int(probe_batch))
    cpus = sorted(request.cpu_ids) if request.cpu_ids is not None else \
        cpu_affinity_set(alloc.cpus)
    ranked = plan.ranked(alloc.replicas)
    env = torchrun.launch_environment(env, cpus, alloc.replicas) if ranked else env
    env.update(request.rank_env or {})
    if request.live is not None and not ranked:  # see _cloudopt_probe_load
        env["CLOUDOPT_LOAD_CORES"] = ",".join(str(c) for c in (request.live.cores or cpus))
    world = alloc.replicas if ranked else int((request.rank_env or {}).get("WORLD_SIZE", 1))
    command = plan.command(alloc)
    started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return TrialLaunch(command, env, cpus, work, request.name, probe_events, probe_batch,
                       world, started_at)


def launch_record(plan: LaunchPlan, request: TrialRequest, launch: TrialLaunch
                  ) -> dict[str, Any]:
    """``config.json``: the trial as launched (the allocation before any batch label was
    added to its summary, the command, the recorded variables, the script's digest)."""
    alloc, target = request.allocation, request.loss_target
    return {
        "trial_id": launch.trial_id, "allocation": alloc, "train_file": str(plan.script.path),
        "train_args": list(plan.train_args), "command": launch.command,
        "cpu_affinity": launch.cpus, "script_sha256": plan.script_digest(),
        "env": recorded_env(launch.env, plan.batch_size_env),
        "batch_env": plan.batch_environment(alloc.batch_size),
        "probe_seconds": request.probe_seconds, "timeout_s": request.timeout_s,
        "monitor_interval": request.monitor_interval, "started_at": launch.started_at,
        "loss_target": target.to_dict() if target is not None else None,
        "until_box": request.until_box,
    }


__all__ = ["TrialLaunch", "launch_record", "trial_launch"]

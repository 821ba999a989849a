"""Trials as Ray tasks: side by side on one big machine, or across a cluster's nodes.

Each trial is one task whose resource request is its allocation (``num_cpus``, ``num_gpus``,
``memory``), so Ray starts concurrent trials only where they fit without oversubscribing a
node. Inside the task the same runner as the local executor runs the script
(:meth:`~optimizer.trials.training.TrainingModuleManager.run_training`): CPU affinity on cores leased
from the node (:mod:`optimizer.trials.core_lease`, since Ray counts CPUs but does not say which),
threads, ``CUDA_VISIBLE_DEVICES`` from the GPU ids Ray assigned, the memory limit and the
monitor. The task writes the trial into a temporary folder of its node and returns its files;
the driver writes them into the run folder (``summary.json`` last, atomically), as the local
executor does. So a run folder looks the same whichever executor filled it, and ``--resume``
works with either.

A task that cannot run (no node has the CPUs or GPUs it asks for), whose worker or node dies,
or that Ray's memory monitor kills, comes back as a recorded failed trial (``infeasible``,
``worker-lost``, ``oom``); the optimization goes on.

Ray is an optional extra (``pip install 'cloudopt[ray]'``), imported only here. Without an
address a local Ray sized to this machine is started (and stopped by :meth:`close`); with one
(``--ray-address``, e.g. ``ray://head:10001`` or ``auto``), the script's folder is shipped to
the cluster as the tasks' working directory, and the nodes need cloudopt installed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import atomic_write_bytes, atomic_write_json
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.trials.executors.base import TrialRequest, record_concurrency
from optimizer.trials.records import SUMMARY_FILE, TrialSummary, write_trials_csv

GIB = 2**30
OBJECT_STORE_BYTES = 256 * 2**20
"""A local Ray's object store: trial files are small, and the default (30% of memory) would take
memory the trials themselves are measured on."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise CloudoptError("--executor ray needs Ray: pip install 'cloudopt[ray]' (or choose "
                            "--executor local)") from None
    return ray


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


TRIAL_PREFIX = "cloudopt-trial-"


def remove_orphaned_folders(root: str | None = None) -> list[Path]:
    """Remove the temporary trial folders of workers that died (killed with their trial, so
    their own clean-up never ran); returns what was removed. A folder's name carries its
    worker's process id."""
    import shutil

    import psutil

    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{TRIAL_PREFIX}*-*"):
        pid = d.name[len(TRIAL_PREFIX):].split("-", 1)[0]
        if d.is_dir() and pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def run_trial_task(spec: dict[str, Any], request: dict[str, Any]) -> dict[str, bytes]:
    """The body of one Ray task (runs on a worker): the trial, and its files as bytes."""
    import ray

    from optimizer.trials.core_lease import CoreLease
    from optimizer.trials.training import TrainingModuleManager

    alloc = Allocation(**request["allocation"])
    manager = TrainingModuleManager(spec["train_file"], spec["train_args"], spec["batch_size_arg"],
                                    spec["batch_size_env"], spec.get("workers_arg"))
    gpu_ids = [int(g) for g in ray.get_gpu_ids()] if alloc.gpus else None
    remove_orphaned_folders()
    with tempfile.TemporaryDirectory(prefix=f"{TRIAL_PREFIX}{os.getpid()}-") as tmp:
        trial_dir = Path(tmp) / request["name"]
        with CoreLease(alloc.cpus) as cores:
            manager.run_training(
                alloc, trial_dir, resource_config=ResourceConfig(**spec["resources"]),
                probe_seconds=request["probe_seconds"], timeout_s=request["timeout_s"],
                monitor_interval=request["monitor_interval"],
                total_samples=request["total_samples"], quiet=True, cpu_ids=cores,
                visible_devices=gpu_ids)
        return {p.name: p.read_bytes() for p in trial_dir.iterdir() if p.is_file()}


def _call(fn: Callable[[], Any]) -> Any:
    return fn()


class RayExecutor:
    """Trials as Ray tasks (see the module docstring).

    Parameters
    ----------
    address : str, optional
        An existing cluster (``auto``, ``ray://host:10001``, ``host:6379``); default: start a
        local Ray sized to this machine (or use the one this process already started).
    num_cpus, num_gpus : int, optional
        Size of a local Ray (default: this process's CPUs and the GPUs NVML sees).
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None,
                 num_gpus: int | None = None) -> None:
        ray = _ray()
        self.address = address or None
        self._started = False
        self._runtime_env: dict[str, Any] | None = None
        if not ray.is_initialized():
            common = dict(log_to_driver=False, logging_level=logging.WARNING,
                          include_dashboard=False)
            try:
                if self.address:
                    ray.init(address=self.address, **common)
                else:
                    from optimizer.foundation.gpu import nvml_device_count

                    cpus = num_cpus or len(os.sched_getaffinity(0))
                    gpus = nvml_device_count() if num_gpus is None else num_gpus
                    ray.init(num_cpus=cpus, num_gpus=gpus,
                             object_store_memory=OBJECT_STORE_BYTES, **common)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or "a local Ray"
                raise CloudoptError(f"--executor ray: could not start or reach {where}: "
                                    f"{exc}") from None
            self._started = True
        self._task = ray.remote(max_retries=0)(run_trial_task)

    # -- the cluster -------------------------------------------------------------------------
    def _nodes(self) -> list[dict[str, float]]:
        ray = _ray()
        return [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]

    def _fit(self, alloc: Allocation) -> tuple[dict[str, Any] | None, str]:
        """Ray options for ``alloc`` (memory capped at the largest node's), or None and why
        no node can run it."""
        nodes = self._nodes()
        fits = [n for n in nodes if n.get("CPU", 0) >= alloc.cpus and n.get("GPU", 0) >= alloc.gpus]
        if not fits:
            most_cpu = max((n.get("CPU", 0) for n in nodes), default=0)
            most_gpu = max((n.get("GPU", 0) for n in nodes), default=0)
            return None, (f"no Ray node has {alloc.cpus} CPU(s) and {alloc.gpus} GPU(s) (the "
                          f"largest has {most_cpu:g} CPUs, {most_gpu:g} GPUs)")
        memory = min(alloc.memory_gb * GIB, max(n.get("memory", 0) for n in fits))
        options = {"num_cpus": alloc.cpus, "num_gpus": alloc.gpus, "name": "cloudopt-trial"}
        if memory > 0:
            options["memory"] = int(memory)
        return options, ""

    def _spec(self, manager: Any, resource_config: ResourceConfig) -> dict[str, Any]:
        path = Path(manager.module_path).resolve()
        if self.address and self._runtime_env is None:
            self._runtime_env = {"working_dir": str(path.parent)}
        return {"train_file": path.name if self.address else str(path),
                "train_args": list(manager.train_args), "batch_size_arg": manager.batch_size_arg,
                "batch_size_env": manager.batch_size_env,
                "workers_arg": getattr(manager, "workers_arg", None),
                "resources": dataclasses.asdict(resource_config)}

    # -- running -----------------------------------------------------------------------------
    def run(self, manager: Any, requests: Sequence[TrialRequest],
            resource_config: ResourceConfig) -> Iterator[tuple[int, TrialSummary]]:
        ray = _ray()
        spec = self._spec(manager, resource_config)
        pending: dict[Any, int] = {}
        started: dict[int, str] = {}
        done: list[tuple[TrialSummary, Path]] = []
        try:
            for i, req in enumerate(requests):
                options, why = self._fit(req.allocation)
                if options is None:
                    summary = self._failed(manager, req, "infeasible", why, _now())
                    yield i, summary
                    continue
                if self._runtime_env:
                    options["runtime_env"] = self._runtime_env
                started[i] = _now()
                ref = self._task.options(**options).remote(spec, {
                    "allocation": dataclasses.asdict(req.allocation), "name": req.trial_dir.name,
                    "probe_seconds": req.probe_seconds, "timeout_s": req.timeout_s,
                    "monitor_interval": req.monitor_interval,
                    "total_samples": req.total_samples})
                pending[ref] = i
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(ready[0])
                req = requests[i]
                try:
                    summary = self._write(manager, req, ray.get(ready[0]))
                except ray.exceptions.OutOfMemoryError as exc:
                    summary = self._failed(manager, req, "oom", str(exc), started[i])
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.TaskCancelledError, ray.exceptions.RaySystemError,
                        ray.exceptions.LocalRayletDiedError) as exc:
                    summary = self._failed(manager, req, "worker-lost", str(exc), started[i])
                except ray.exceptions.RayTaskError as exc:
                    summary = self._failed(manager, req, "executor-error", str(exc), started[i])
                done.append((summary, req.trial_dir))
                record_concurrency(done)
                yield i, summary
        finally:
            for ref in pending:  # interrupted: no trial outlives the run that wanted it
                ray.cancel(ref, force=True)

    def _write(self, manager: Any, req: TrialRequest, files: dict[str, bytes]) -> TrialSummary:
        """The task's files into ``req.trial_dir``; command and script as the driver sees them,
        so that ``--resume`` recognises the trial."""
        d = req.trial_dir
        d.mkdir(parents=True, exist_ok=True)
        (d / SUMMARY_FILE).unlink(missing_ok=True)
        config = json.loads(files.pop("config.json", b"{}"))
        config.update(worker_command=config.get("command"), command=manager.command(req.allocation),
                      train_file=str(manager.module_path), executor="ray")
        atomic_write_json(d / "config.json", config)
        summary = TrialSummary.from_dict(json.loads(files.pop(SUMMARY_FILE)), str(d / SUMMARY_FILE))
        for name, data in files.items():
            atomic_write_bytes(d / name, data)
        summary.executor, summary.train_file = "ray", str(manager.module_path)
        summary.save(d)
        write_trials_csv(d.parent.parent)
        return summary

    def _failed(self, manager: Any, req: TrialRequest, reason: str, message: str,
                started_at: str) -> TrialSummary:
        """A recorded failed trial for a task that did not come back."""
        d = req.trial_dir
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_json(d / "config.json", {
            "trial_id": d.name, "allocation": req.allocation,
            "train_file": str(manager.module_path), "train_args": list(manager.train_args),
            "command": manager.command(req.allocation), "script_sha256": manager.script_digest(),
            "executor": "ray", "started_at": started_at})
        summary = TrialSummary(
            trial_id=d.name, status="failed", allocation=req.allocation, reason=reason,
            train_file=str(manager.module_path), train_args=list(manager.train_args),
            stderr_tail=message[-2000:], started_at=started_at, finished_at=_now(),
            executor="ray", node="")
        summary.save(d)
        write_trials_csv(d.parent.parent)
        return summary

    def map(self, fns: Sequence[Callable[[], Any]]) -> list[Any]:
        """Each function as a 1-CPU Ray task, side by side (the agents' trainings: the
        results travel back through Ray's own serialisation, between our processes only)."""
        ray = _ray()
        remote = ray.remote(num_cpus=1, max_retries=0)(_call)
        return ray.get([remote.remote(f) for f in fns])

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False


__all__ = ["RayExecutor", "remove_orphaned_folders", "run_trial_task"]

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
``worker-lost``, ``oom``) whose ``stderr_tail`` starts with one line saying what happened; the
optimization goes on, and ``--resume`` measures ``worker-lost`` trials again.

A data-parallel trial (several replicas of a torchrun script) runs as a Ray Train job instead,
one worker per rank (:mod:`optimizer.trials.executors.ray_train`), and fills one trial folder.

Ray is an optional extra (``pip install 'cloudopt[ray]'``), imported only here, and joined or
started on first use. Without an address a local Ray sized to this machine is started (and
stopped by :meth:`close`); with one (``--ray-address``, e.g. ``auto``, ``HEAD:6379`` or
``ray://HEAD:10001``), the script's folder is shipped as the job's working directory (Ray
uploads it once per ``ray.init``, so the connection is made when the script is known, and made
again for a script in another folder), the trials run the copy each node unpacked, and the
nodes need cloudopt installed.
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
from optimizer.trials.executors.base import record_concurrency
from optimizer.trials.executors.ray_train import (
    is_distributed,
    job_task,
    worker_resources,
    write_job,
)
from optimizer.trials.records import SUMMARY_FILE, TrialSummary, write_trials_csv
from optimizer.trials.run.request import TrialRequest

GIB = 2**30
OBJECT_STORE_BYTES = 256 * 2**20
"""A local Ray's object store: trial files are small, and the default (30% of memory) would take
memory the trials themselves are measured on."""
SHIP_EXCLUDES = (".git/", ".venv/", "venv/", "__pycache__/", "*.pyc", ".mypy_cache/",
                 ".pytest_cache/", ".ruff_cache/", ".ipynb_checkpoints/", "node_modules/",
                 "runs/")
"""Left out of the script's folder shipped to a cluster (gitignore patterns, as Ray reads them;
Ray also honours the folder's own ``.gitignore``): environments, caches and earlier runs, which
the script does not read and which would make the upload large or over Ray's limit."""
LARGE_FILE_BYTES = 64 * 2**20
"""Files above this stay behind too (with a warning): Ray keeps the whole upload in its GCS, and
data that large belongs on storage the nodes share."""
log = logging.getLogger(__name__)


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


def shipped_folder(folder: Path, also_exclude: Sequence[Path] = ()) -> dict[str, Any]:
    """The job-level ``runtime_env`` that ships ``folder`` (the script's) to a cluster's nodes,
    without :data:`SHIP_EXCLUDES`, the folders in ``also_exclude`` that lie inside it (this
    run's folder) and files over :data:`LARGE_FILE_BYTES`."""
    folder = folder.resolve()
    excludes = list(SHIP_EXCLUDES)
    for p in also_exclude:
        try:
            inside = Path(p).resolve().relative_to(folder)
        except ValueError:
            continue
        if inside.parts:
            excludes.append(f"/{_pattern(inside)}/")
    skip = {e.rstrip("/") for e in SHIP_EXCLUDES if e.endswith("/")}
    large = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            f = Path(root) / name
            try:
                big = f.stat().st_size > LARGE_FILE_BYTES
            except OSError:  # a dangling link: Ray skips it too
                continue
            if big:
                large.append(f.relative_to(folder))
                excludes.append(f"/{_pattern(large[-1])}")
    if large:
        log.warning("not shipped to the Ray cluster (over %d MiB each): %s; a script that reads "
                    "them needs them on storage its nodes share", LARGE_FILE_BYTES >> 20,
                    ", ".join(map(str, large)))
    return {"working_dir": str(folder), "excludes": excludes}


def _pattern(rel: Path) -> str:
    """``rel`` as a gitignore pattern matching only itself."""
    return "".join("\\" + c if c in "[]*?\\" else c for c in rel.as_posix())


def _script_on_node(spec: dict[str, Any]) -> Path:
    """The script as this node sees it: the copy Ray unpacked from the shipped folder (the
    task's working directory) when the folder was shipped, else the driver's own path (a local
    Ray, or a cluster that shares the driver's disk)."""
    shipped = spec.get("shipped_as")
    path = Path.cwd() / shipped if shipped else Path(spec["train_file"])
    if not path.is_file():
        import ray

        raise FileNotFoundError(f"{path} is not on Ray node {ray.util.get_node_ip_address()}: "
                                "join the cluster with --ray-address so that cloudopt ships the "
                                "script's folder, or put the script on a disk the nodes share")
    return path


def run_trial_task(spec: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The body of one Ray task (runs on a worker): the trial, its files as bytes, and the node
    it ran on."""
    import ray

    from optimizer.trials.core_lease import CoreLease
    from optimizer.trials.probe.loss_target import LossTarget
    from optimizer.trials.training import TrainingModuleManager

    alloc = Allocation(**request["allocation"])
    manager = TrainingModuleManager(_script_on_node(spec), spec["train_args"],
                                    spec["batch_size_arg"], spec["batch_size_env"],
                                    spec.get("workers_arg"))
    manager.in_process_probe = spec.get("in_process_probe", True)
    gpu_ids = [int(g) for g in ray.get_gpu_ids()] if alloc.gpus else None
    remove_orphaned_folders()
    with tempfile.TemporaryDirectory(prefix=f"{TRIAL_PREFIX}{os.getpid()}-") as tmp:
        trial_dir = Path(tmp) / request["name"]
        with CoreLease(alloc.cpus) as cores:
            manager.run_training(TrialRequest(
                alloc, trial_dir, probe_seconds=request["probe_seconds"],
                timeout_s=request["timeout_s"], monitor_interval=request["monitor_interval"],
                total_samples=request["total_samples"], live=request.get("live"),
                until_box=bool(request.get("until_box")),
                loss_target=LossTarget.from_dict(request.get("loss_target")),
                visible_devices=gpu_ids, cpu_ids=cores),
                ResourceConfig(**spec["resources"]))
        files = {p.name: p.read_bytes() for p in trial_dir.iterdir() if p.is_file()}
    return {"files": files, "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address()}


def _call(fn: Callable[[], Any]) -> Any:
    return fn()


class RayExecutor:
    """Trials as Ray tasks (see the module docstring).

    Parameters
    ----------
    address : str, optional
        An existing cluster (``auto``, ``HEAD:6379``, ``ray://HEAD:10001``); default: start a
        local Ray sized to this machine (or use the one this process already started).
    num_cpus, num_gpus : int, optional
        Size of a local Ray (default: this process's CPUs and the GPUs NVML sees).
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None,
                 num_gpus: int | None = None) -> None:
        _ray()  # without Ray, fail now rather than at the first trial
        self.address = address or None
        self._num_cpus, self._num_gpus = num_cpus, num_gpus
        self._started = False
        self._folder: Path | None = None
        """The folder of the last script run, shipped with the next connection."""
        self._shipped: Path | None = None
        """The folder the current connection shipped (None: none was, paths are the driver's)."""
        # No retry: a retried trial's wall time and rate would be those of a second attempt,
        # started later and perhaps on another node, recorded as if measured once; a failed
        # trial is recorded as such and measured again on --resume instead.
        self._task = _ray().remote(max_retries=0)(run_trial_task)

    # -- the cluster -------------------------------------------------------------------------
    def _connect(self, also_exclude: Sequence[Path] = ()) -> None:
        """Join (or start) Ray, shipping the script's folder to a cluster. Ray uploads a job's
        working directory once, at ``ray.init``: a script in another folder than the one
        shipped needs a new connection (made only when this executor made the first)."""
        ray = _ray()
        if ray.is_initialized():
            if not (self._started and self.address and self._folder
                    and self._folder != self._shipped):
                return
            ray.shutdown()
            self._started = False
        common = dict(log_to_driver=False, logging_level=logging.WARNING,
                      include_dashboard=False)
        try:
            if self.address:
                env = shipped_folder(self._folder, also_exclude) if self._folder else None
                ray.init(address=self.address, runtime_env=env, **common)
                self._shipped = self._folder
            else:
                from optimizer.foundation.gpu import nvml_device_count

                cpus = self._num_cpus or len(os.sched_getaffinity(0))
                gpus = nvml_device_count() if self._num_gpus is None else self._num_gpus
                ray.init(num_cpus=cpus, num_gpus=gpus, object_store_memory=OBJECT_STORE_BYTES,
                         **common)
        except (ConnectionError, RuntimeError, ValueError, OSError) as exc:
            where = self.address or "a local Ray"
            raise CloudoptError(f"--executor ray: could not start or reach {where}: "
                                f"{exc}") from None
        self._started = True

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
        return {"train_file": str(path),
                "shipped_as": path.name if self._shipped == path.parent else None,
                "train_args": list(manager.train_args), "batch_size_arg": manager.batch_size_arg,
                "batch_size_env": manager.batch_size_env,
                "in_process_probe": manager.in_process_probe,
                "workers_arg": getattr(manager, "workers_arg", None),
                "resources": dataclasses.asdict(resource_config)}

    # -- running -----------------------------------------------------------------------------
    def run(self, manager: Any, requests: Sequence[TrialRequest],
            resource_config: ResourceConfig) -> Iterator[tuple[int, TrialSummary]]:
        ray = _ray()
        self._folder = Path(manager.module_path).resolve().parent
        if not requests:
            return
        self._connect([r.trial_dir.parent.parent for r in requests])
        spec = self._spec(manager, resource_config)
        pending: dict[Any, int] = {}
        started: dict[int, str] = {}
        done: list[tuple[TrialSummary, Path]] = []
        try:
            for i, req in enumerate(requests):
                ddp = is_distributed(manager, req.allocation)  # a Ray Train job (ray_train)
                options, why = worker_resources(req.allocation, self._nodes()) if ddp else \
                    self._fit(req.allocation)
                if options is None:
                    summary = self._failed(manager, req, "infeasible", why, _now())
                    yield i, summary
                    continue
                started[i] = _now()
                task = job_task() if ddp else self._task.options(**options)
                ref = task.remote(spec, {"per_worker": options,
                    "allocation": dataclasses.asdict(req.allocation), "name": req.trial_dir.name,
                    "probe_seconds": req.probe_seconds, "timeout_s": req.timeout_s,
                    "monitor_interval": req.monitor_interval,
                    "total_samples": req.total_samples, "live": req.live,
                    "loss_target": req.loss_target and req.loss_target.to_dict(),
                    "until_box": req.until_box})
                pending[ref] = i
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(ready[0])
                req = requests[i]
                try:
                    summary = self._write(manager, req, ray.get(ready[0]))
                except ray.exceptions.RayError as exc:
                    reason, line = lost_reason(exc)
                    summary = self._failed(manager, req, reason, f"{line}\n{exc}", started[i])
                done.append((summary, req.trial_dir))
                record_concurrency(done)
                yield i, summary
        finally:
            for ref in pending:  # interrupted: no trial outlives the run that wanted it
                ray.cancel(ref, force=True)

    def _write(self, manager: Any, req: TrialRequest, result: dict[str, Any]) -> TrialSummary:
        """The task's files into ``req.trial_dir``; command and script as the driver sees them,
        so that ``--resume`` recognises the trial, and the Ray node it ran on."""
        if "ranks" in result:  # a data-parallel job: its ranks' files into one trial
            return write_job(manager, req, result, write=self._write, failed=self._failed)
        files = dict(result["files"])
        d = req.trial_dir
        d.mkdir(parents=True, exist_ok=True)
        (d / SUMMARY_FILE).unlink(missing_ok=True)
        config = json.loads(files.pop("config.json", b"{}"))
        config.update(worker_command=config.get("command"), command=manager.command(req.allocation),
                      train_file=str(manager.module_path), executor="ray",
                      ray_node_id=result.get("node_id"), ray_node_ip=result.get("node_ip"))
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
            stderr_tail=_head_and_tail(message), started_at=started_at, finished_at=_now(),
            executor="ray", node="")
        summary.save(d)
        write_trials_csv(d.parent.parent)
        return summary

    def map(self, fns: Sequence[Callable[[], Any]]) -> list[Any]:
        """Each function as a 1-CPU Ray task, side by side (the agents' trainings: the
        results travel back through Ray's own serialisation, between our processes only)."""
        ray = _ray()
        self._connect()
        remote = ray.remote(num_cpus=1, max_retries=0)(_call)
        return ray.get([remote.remote(f) for f in fns])

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False
            self._shipped = None


def lost_reason(exc: BaseException) -> tuple[str, str]:
    """(``reason``, one line saying what happened) for a trial's task that raised ``exc``
    instead of returning: ``oom`` when Ray's memory monitor killed it (the local runner's word
    for a trial that ran out of memory, so the choice gives that setting more), ``worker-lost``
    when its worker or node died (measured again on ``--resume``), else ``executor-error``."""
    errors = _ray().exceptions
    name = type(exc).__name__
    if isinstance(exc, errors.RayTaskError):  # our task body raised: not the trial's doing
        cause = str(exc).strip().splitlines()[-1:] or [name]
        return "executor-error", f"the trial's Ray task failed: {cause[0]}"
    if isinstance(exc, errors.OutOfMemoryError):
        return "oom", ("Ray's memory monitor killed the trial (its node ran low on memory): "
                       "out of memory at this allocation")
    if isinstance(exc, (errors.NodeDiedError, errors.LocalRayletDiedError)):
        return "worker-lost", (f"the Ray node running the trial died or left the cluster "
                               f"({name}); --resume measures it again")
    if isinstance(exc, errors.WorkerCrashedError):
        return "worker-lost", (f"the Ray worker running the trial died, killed or crashed "
                               f"({name}); --resume measures it again")
    if isinstance(exc, errors.TaskCancelledError):
        return "worker-lost", f"the trial's Ray task was cancelled ({name})"
    if isinstance(exc, errors.RuntimeEnvSetupError):
        return "executor-error", ("Ray could not unpack the script's folder on the node "
                                  f"({name})")
    return "worker-lost", f"the trial's Ray task was lost ({name})"


def _head_and_tail(message: str, limit: int = 2000) -> str:
    """``message`` within ``limit`` characters, keeping its first line (what happened) and
    the end of the rest (Ray's details)."""
    if len(message) <= limit:
        return message
    first, _, rest = message.partition("\n")
    first = first[:limit // 2]
    return f"{first}\n{rest[-(limit - len(first) - 1):]}"


__all__ = ["RayExecutor", "lost_reason", "remove_orphaned_folders", "run_trial_task",
           "shipped_folder"]

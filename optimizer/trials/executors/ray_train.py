"""Data-parallel trials on a Ray cluster: one trial's ranks as the workers of a Ray Train job.

A trial whose allocation has ``replicas > 1`` (a script launched by torchrun) runs as a
``ray.train.torch.TorchTrainer`` with one worker per rank, each asking for its share of the
allocation (``cpus / replicas`` CPUs, ``gpus / replicas`` GPUs, ``memory_gb / replicas``), so
that the ranks may land on different nodes. One Ray task without CPUs drives the trainer
(:func:`run_job`): the executor waits for it beside a batch's other trials, and cancels it.

Each worker (:func:`train_loop`) runs its rank exactly as torchrun would start it: rank 0
picks its node's address and a free port, shared with the others by Ray Train's
``broadcast_from_rank_zero`` (the V2 API, Ray's default; over Ray Train's own process group
under V1); then every worker runs the unmodified script through
:meth:`~optimizer.trials.training.TrainingModuleManager.run_training` with torchrun's variables
(:func:`~optimizer.trials.launchers.torchrun.rank_environment`), pinned to cores it leased
(:class:`~optimizer.trials.core_lease.CoreLease`), monitored and time-boxed like any trial. Each
rank is started as its node's only rank, with only the GPUs Ray gave it (``LOCAL_RANK`` 0),
as a pod per worker would be. Rank 0 keeps the probe's time box; the others run until their
script ends, or are stopped :data:`GRACE_S` seconds after rank 0 ended or a rank failed.

Each worker puts its files into a mailbox actor (Ray Train's metrics are for small values);
the driver writes rank 0's trial with the other ranks' probe events (``probe.rank{r}.jsonl``),
traces (``trace.rank{r}.csv``) and logs beside it, its summary made the whole job's
(:func:`whole_job`: samples and rate summed over the ranks, memory, cost, allocation, each
rank's node). A failed rank fails the trial with one line naming it and its last line of
stderr; an error of Ray Train itself is a recorded failed trial too, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import atomic_write_bytes
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.launchers.torchrun import rank_environment
from optimizer.trials.probe import EVENTS_FILE, read_probe
from optimizer.trials.records import SUMMARY_FILE, TrialSummary, exit_seconds, predict_time
from optimizer.trials.run.request import TrialRequest

GIB = 2**30
GRACE_S = 5.0
"""Seconds a rank's script may run on after rank 0 ended (a probe stopped at its time box,
whose peers may wait on it forever) or after another rank failed."""
JOB_ENV = {"RAY_CHDIR_TO_TRIAL_DIR": "0",  # the workers stay in the shipped script's folder
           "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": str(24 * 3600)}
"""The job task's variables, which Ray Train passes to its controller and workers: a job
queued behind the batch's other trials waits for its CPUs as a task would."""
V1_TRAINER = {"trainer_resources": {"CPU": 0}}  # Train V1's trainer actor: no CPU of its own
RANK_LOGS = {"trace.csv": "trace.rank{r}.csv", "stdout.log": "stdout.rank{r}.log",
             "stderr.log": "stderr.rank{r}.log"}
"""The files of ranks other than 0 kept beside rank 0's, and their names there."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def is_distributed(manager: Any, allocation: Allocation) -> bool:
    """Whether a trial runs as a Ray Train job: several replicas of a torchrun script."""
    return allocation.replicas > 1 and getattr(manager, "launcher", "python") == "torchrun"


def rank_share(allocation: Allocation) -> Allocation:
    """What each rank runs with: its share of the job's CPUs, GPUs and memory; the batch."""
    n = allocation.replicas
    return dataclasses.replace(allocation, cpus=max(allocation.cpus // n, 1),
                               gpus=allocation.gpus // n, memory_gb=allocation.memory_gb / n,
                               replicas=1)


def worker_resources(allocation: Allocation, nodes: Sequence[Mapping[str, float]]
                     ) -> tuple[dict[str, float] | None, str]:
    """Ray Train's ``resources_per_worker`` for ``allocation`` (memory capped at the largest
    node's), or None and why the cluster's nodes cannot hold its ranks."""
    n = allocation.replicas
    cpu, gpu = allocation.cpus / n, allocation.gpus / n
    slots = sum(min(math.floor(node.get("CPU", 0) / cpu + 1e-9),
                    math.floor(node.get("GPU", 0) / gpu + 1e-9) if gpu else n)
                for node in nodes)
    if slots < n:
        return None, (f"the Ray nodes hold {slots} of the {n} workers of {cpu:g} CPU(s) and "
                      f"{gpu:g} GPU(s) each")
    memory = min(allocation.memory_gb * GIB / n, max(node.get("memory", 0) for node in nodes))
    return {"CPU": cpu, **({"GPU": gpu} if gpu else {}),
            **({"memory": int(memory)} if memory > 0 else {})}, ""


def job_task() -> Any:
    """:func:`run_job` as a Ray task that asks for no CPUs (its workers hold the trial's)."""
    import ray

    return ray.remote(max_retries=0)(run_job).options(
        num_cpus=0, name="cloudopt-ddp-trial", runtime_env={"env_vars": JOB_ENV})


def scaling_config(config_class: Any, alloc: Allocation,
                   per_worker: Mapping[str, float]) -> Any:
    """Ray Train's ``ScalingConfig`` for ``alloc``'s ranks. Train V1 gives its trainer actor
    a CPU unless told otherwise (:data:`V1_TRAINER`); V2, Ray's default, has no such actor and
    refuses the field, which is how the two are told apart with public API only."""
    fields = {"num_workers": alloc.replicas, "use_gpu": alloc.gpus > 0,
              "resources_per_worker": dict(per_worker)}
    try:
        return config_class(**fields, **V1_TRAINER)
    except (DeprecationWarning, TypeError, ValueError):
        return config_class(**fields)


class Mailbox:
    """Where the ranks leave their results (a Ray actor made by :func:`run_job`)."""

    def __init__(self) -> None:
        self.results: dict[int, dict[str, Any]] = {}

    def put(self, rank: int, result: dict[str, Any]) -> None:
        self.results[rank] = result

    def ended(self) -> dict[int, bool]:
        """Each rank that has ended, and whether its run went well."""
        return {r: bool(res.get("ok")) for r, res in self.results.items()}

    def take(self) -> list[dict[str, Any]]:
        return list(self.results.values())


def run_job(spec: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The Ray task driving one data-parallel trial: its Ray Train job; the ranks' results."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    alloc = Allocation(**request["allocation"])
    mailbox = ray.remote(num_cpus=0)(Mailbox).remote()
    started, error = _now(), None
    with tempfile.TemporaryDirectory(prefix=f"cloudopt-trial-{os.getpid()}-") as storage:
        trainer = TorchTrainer(
            train_loop, train_loop_config={"spec": spec, "request": request,
                                           "mailbox": mailbox},
            scaling_config=scaling_config(ScalingConfig, alloc, request["per_worker"]),
            # gloo even beside GPUs: NCCL would hold GPU memory in each worker while it runs
            torch_config=TorchConfig(backend="gloo"),
            run_config=RunConfig(name=request["name"], storage_path=storage,
                                 failure_config=FailureConfig(max_failures=0)))
        try:
            trainer.fit()
        except Exception as exc:  # noqa: BLE001 - Ray Train's failures are recorded trials
            error = train_error(exc)
    ranks = ray.get(mailbox.take.remote())
    ray.kill(mailbox)
    return {"ranks": ranks, "world": alloc.replicas, "error": error, "started_at": started,
            "resources": spec["resources"]}


def train_error(exc: BaseException) -> tuple[str, str]:
    """(``reason``, one line) for an error of Ray Train itself: ``worker-lost`` when a worker
    or its node died (measured again on ``--resume``), else ``executor-error``."""
    causes = [*(getattr(exc, "worker_failures", None) or {}).values(), exc.__cause__, exc]
    lost = {"ActorDiedError", "RayActorError", "NodeDiedError", "WorkerCrashedError",
            "ActorUnavailableError"} & {type(c).__name__ for c in causes}
    last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
    if lost:
        return "worker-lost", (f"a Ray Train worker of the trial died or lost its node "
                               f"({last}); --resume measures it again")
    return "executor-error", f"the trial's Ray Train job failed ({type(exc).__name__}: {last})"


# -- on each worker ----------------------------------------------------------------------------
def train_loop(config: dict[str, Any]) -> None:
    """One rank, in a Ray Train worker: the script under torchrun's variables; its files."""
    import ray

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    node = {"rank": rank, "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(), "host": socket.gethostname()}
    try:
        master = _share(_free_address() if rank == 0 else None)
        result = run_rank(config, rank, world, master)
    except Exception as exc:  # noqa: BLE001 - reported as the trial's failure, not raised
        result = {"error": f"{type(exc).__name__}: {exc}", "ok": False}
    ray.get(config["mailbox"].put.remote(rank, {**node, **result}))


def _free_address() -> tuple[str, int]:
    """This node's address and a port free on it, for the script's rendezvous."""
    import ray

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]


def _share(value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    try:
        from ray.train.collective import broadcast_from_rank_zero
    except ImportError:  # Ray Train V1: over the process group it set up
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return broadcast_from_rank_zero(value)


def run_rank(config: dict[str, Any], rank: int, world: int, master: tuple[str, int]
             ) -> dict[str, Any]:
    """Rank ``rank``'s run of the script, as a trial in a temporary folder; its files."""
    import ray

    from optimizer.trials.core_lease import CoreLease
    from optimizer.trials.probe.loss_target import LossTarget
    from optimizer.trials.training import TrainingModuleManager

    spec, request = config["spec"], config["request"]
    share = rank_share(Allocation(**request["allocation"]))
    shipped = spec.get("shipped_as")  # the copy Ray unpacked into this worker's folder
    manager = TrainingModuleManager(Path.cwd() / shipped if shipped else spec["train_file"],
                                    spec["train_args"], spec["batch_size_arg"],
                                    spec["batch_size_env"], spec.get("workers_arg"))
    manager.in_process_probe = spec.get("in_process_probe", True)
    gpu_ids = [int(g) for g in ray.get_gpu_ids()] if share.gpus else None
    env = rank_environment(rank, world, local_rank=0, local_world=1, master_addr=master[0],
                           master_port=master[1])
    lead = rank == 0
    watch = _Watch(manager, config["mailbox"], rank)
    with tempfile.TemporaryDirectory(prefix=f"cloudopt-trial-{os.getpid()}-") as tmp:
        trial_dir = Path(tmp) / request["name"]
        with CoreLease(share.cpus) as cores:
            watch.start()
            try:
                summary = manager.run_training(TrialRequest(
                    share, trial_dir, probe_seconds=request["probe_seconds"] if lead else None,
                    timeout_s=request["timeout_s"], monitor_interval=request["monitor_interval"],
                    total_samples=request["total_samples"],
                    until_box=bool(request.get("until_box")) and lead,
                    loss_target=LossTarget.from_dict(request.get("loss_target")) if lead else None,
                    visible_devices=gpu_ids, cpu_ids=cores, rank_env=env),
                    ResourceConfig(**spec["resources"]))
            finally:
                watch.done.set()
        files = {p.name: p.read_bytes() for p in trial_dir.iterdir() if p.is_file()}
    return {"files": files, "ok": summary.ok, "stopped": watch.stopped}


class _Watch(threading.Thread):
    """Stops this rank's script :data:`GRACE_S` seconds after rank 0 ended (any other rank) or
    another rank failed: the peers of a stopped or failed rank may wait on it for ever."""

    def __init__(self, manager: Any, mailbox: Any, rank: int) -> None:
        super().__init__(daemon=True)
        self.manager, self.mailbox, self.rank = manager, mailbox, rank
        self.done, self.stopped = threading.Event(), False

    def run(self) -> None:
        import ray

        from optimizer.trials.monitor import kill_tree

        since = None
        while not self.done.wait(1.0):
            if since is None:
                ended = {r: ok for r, ok in ray.get(self.mailbox.ended.remote()).items()
                         if r != self.rank}
                if (0 in ended and self.rank != 0) or not all(ended.values()):
                    since = time.monotonic()
            proc = self.manager.training_process
            if since is not None and time.monotonic() - since >= GRACE_S and proc is not None:
                if proc.poll() is None:
                    self.stopped = True
                    kill_tree(proc.pid, popen=proc)
                return


# -- on the driver -----------------------------------------------------------------------------
def write_job(manager: Any, req: Any, result: dict[str, Any], *,
              write: Callable[..., TrialSummary],
              failed: Callable[..., TrialSummary]) -> TrialSummary:
    """The job's trial into ``req.trial_dir``: the other ranks' files, then rank 0's through
    ``write`` (the executor's, which writes ``summary.json`` last) with the summary corrected
    to the whole job; ``failed`` records a job whose rank 0 left nothing."""
    world, ranks = int(result["world"]), {int(r["rank"]): r for r in result["ranks"]}
    failure = rank_failure(ranks, world) or (result["error"] if result.get("error") and (
        len(ranks) < world or not all(r.get("ok") for r in ranks.values())) else None)
    lead = ranks.get(0, {})
    if "files" not in lead:
        reason, line = (failure or ("executor-error", "rank 0 sent no result"))[:2]
        return failed(manager, req, reason, line, result.get("started_at") or _now())
    d = req.trial_dir
    d.mkdir(parents=True, exist_ok=True)
    (d / SUMMARY_FILE).unlink(missing_ok=True)
    for r, res in sorted(ranks.items()):
        for name, data in (res.get("files") or {}).items():
            if r and (name.startswith("probe.rank") or name in RANK_LOGS):
                atomic_write_bytes(d / RANK_LOGS.get(name, name).format(r=r), data)
    files = dict(lead["files"])
    if EVENTS_FILE in files:
        atomic_write_bytes(d / EVENTS_FILE, files[EVENTS_FILE])  # read_probe merges the ranks
    summary = whole_job(TrialSummary.from_dict(json.loads(files[SUMMARY_FILE])), req.allocation,
                        ranks, ResourceConfig(**result["resources"]), d, failure)
    files[SUMMARY_FILE] = json.dumps(summary.to_dict()).encode()
    config = json.loads(files.get("config.json", b"{}"))
    config.update(allocation=dataclasses.asdict(req.allocation),
                  rank_allocation=config.get("allocation"),
                  ray_ranks=summary.model_info["ray_ranks"])
    files["config.json"] = json.dumps(config).encode()
    return write(manager, req, {"files": files, "node_id": lead.get("node_id"),
                                "node_ip": lead.get("node_ip")})


def whole_job(s: TrialSummary, allocation: Allocation, ranks: Mapping[int, dict[str, Any]],
              resources: ResourceConfig, trial_dir: Path,
              failure: tuple[Any, ...] | None) -> TrialSummary:
    """Rank 0's summary ``s`` as the job's: the probe's samples and rate summed over the
    ranks whose events lie in ``trial_dir``, the job's memory and CPUs, its allocation and
    cost, each rank's node; failed with ``failure`` (reason, message[, the rank to blame])."""
    from optimizer.trials.cost import ResourceCostCalculator

    others = [_summary(res) for r, res in sorted(ranks.items()) if r]
    merged = read_probe(trial_dir / EVENTS_FILE)
    alone = read_probe(trial_dir / EVENTS_FILE, ranks=False)
    if s.throughput_source == "probe" and merged is not None and alone is not None \
            and alone.samples > 0 and s.samples is not None and s.throughput:
        scale = merged.samples / alone.samples
        s.samples, s.throughput = s.samples * scale, s.throughput * scale
    s.allocation = allocation
    # Each rank's own peak, rank 0 first, before they are summed: rank 0 (evaluation,
    # checkpoints) often holds more, and a node per rank is sized from its own.
    s.model_info["rank_mem_gb_peak"] = [s.mem_gb_peak] + [
        o.mem_gb_peak if o is not None else 0.0 for o in others]
    for f in ("cpu_cores_mean", "cpu_cores_peak", "mem_gb_mean", "mem_gb_peak"):
        setattr(s, f, getattr(s, f) + sum(getattr(o, f) for o in others if o is not None))
    gpu = [o.gpu_mem_gb_peak for o in [s, *others] if o is not None and o.gpu_mem_gb_peak]
    s.gpu_mem_gb_peak = sum(gpu) if gpu else s.gpu_mem_gb_peak
    s.cpu_util_mean = 100 * s.cpu_cores_mean / max(allocation.cpus, 1)
    s.model_info["ray_ranks"] = [{k: ranks[r].get(k) for k in ("rank", "node_id", "node_ip",
                                                                 "host")} for r in sorted(ranks)]
    if failure is not None:
        blamed = _summary(ranks.get(failure[2], {})) if len(failure) > 2 else None
        s.status, s.reason = "failed", failure[0]
        s.exit_code = blamed.exit_code if blamed is not None else s.exit_code
        tail = blamed.stderr_tail if blamed is not None else ""
        s.stderr_tail = f"{failure[1]}\n{tail}".strip()
    s.hourly_cost = ResourceCostCalculator.from_config(resources).calculate_hourly_cost(allocation)
    s.cost = s.hourly_cost * s.wall_time_s / 3600
    if s.exit_s is None and s.status == "probe":
        s.exit_s = exit_seconds("probe", s.wall_time_s, None, trial_dir.parent, allocation.cpus)
    predicted = predict_time(s.status, s.wall_time_s, s.samples, s.total_samples, s.throughput,
                             s.startup_s, s.exit_s)
    s.predicted_total_time_s = predicted
    s.predicted_total_cost = None if predicted is None else s.hourly_cost * predicted / 3600
    return s


def _summary(res: Mapping[str, Any]) -> TrialSummary | None:
    data = (res.get("files") or {}).get(SUMMARY_FILE)
    return TrialSummary.from_dict(json.loads(data)) if data else None


def rank_failure(ranks: Mapping[int, dict[str, Any]], world: int
                 ) -> tuple[str, str, int] | None:
    """(``reason``, one line, the rank) for the rank whose failure ended the job, or None:
    every rank went well, or rank 0 was a probe stopped at its time box (which breaks its
    peers). The rank blamed: one that could not start, else one killed (by a signal, or at its
    memory limit) before one that crashed, the first to end before the others, never one
    stopped by :class:`_Watch`."""
    lead = _summary(ranks.get(0, {}))
    if lead is not None and lead.status == "probe":
        return None
    bad = []
    for r, res in ranks.items():
        s = _summary(res)
        if res.get("ok") or res.get("stopped") or (s is None and "error" not in res):
            continue
        killed = s is not None and (s.reason == "oom" or (s.exit_code or 0) < 0)
        bad.append((s is not None, not killed, s.finished_at if s else "", r))
    missing = sorted(set(range(world)) - set(ranks))
    if not bad:
        return None if not missing else ("worker-lost", f"rank {missing[0]} of {world} sent "
                                          "no result (its Ray worker died)", missing[0])
    r = min(bad)[3]
    res, s = ranks[r], _summary(ranks[r])
    where = f"rank {r} of {world} on Ray node {res.get('node_ip') or res.get('host')}"
    if s is None:
        return "executor-error", f"{where} could not run the script: {res['error']}", r
    last = ([ln.strip() for ln in s.stderr_tail.splitlines() if ln.strip()]
            or ["stderr was empty"])[-1]
    if s.reason in ("oom", "timeout"):
        return s.reason, f"{where} failed ({s.reason}): {last}", r
    return f"crash ({_how(r, world, s.exit_code)})", f"{where} failed: {last}", r


def _how(rank: int, world: int, code: int | None) -> str:
    """``rank 1 of 2 was killed by signal 9 (SIGKILL)``, ``rank 0 of 2 exited with code 1``
    (torchrun's report in :func:`~optimizer.trials.launchers.torchrun.rank_failure`)."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else "unknown"
        return f"rank {rank} of {world} was killed by signal {-code} ({name})"
    return f"rank {rank} of {world} exited with code {code}"


__all__ = ["GRACE_S", "Mailbox", "is_distributed", "job_task", "rank_failure", "rank_share",
           "run_job", "train_error", "train_loop", "whole_job", "worker_resources", "write_job"]

"""The cluster outputs of one recommendation, written from one description of the job.

A data-parallel pick is one job however it is handed over: ``k8s-job.yaml`` runs the ranks
under torchrun in one pod (``torchrun --standalone --nproc-per-node N``, as the trials were
launched; a bare ``python`` would start one process, and a DDP script reading ``LOCAL_RANK``
fails), ``trainjob.yaml`` runs them one per node on Kubeflow Trainer, ``ray_train_job.py`` one
per Ray Train worker. A job with DataLoader workers gets a memory-backed ``/dev/shm`` in each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import atomic_write_text
from optimizer.foundation.memory import right_size_memory
from optimizer.reports.cluster.ray_job import ray_train_job_source
from optimizer.reports.k8s import k8s_job_yaml
from optimizer.reports.k8s_security import shm_size
from optimizer.reports.k8s_trainjob import k8s_trainjob_yaml, node_share


@dataclass
class JobShape:
    """What the recommended job runs, as the trials ran it."""

    allocation: Allocation
    env: dict[str, str]
    name: str
    """The run's name (objects are named after it)."""
    script: str
    """The script's path (the containers run its file name; the Ray job its path)."""
    args: list[str] = field(default_factory=list)
    launcher: str = "python"
    """``torchrun``: the trials launched ``allocation.replicas`` ranks under torchrun."""
    loader_workers: int | None = None
    """The DataLoader workers the job runs with (None: not known)."""
    workers_flag: str | None = None
    """The script's flag for its DataLoader workers, if it has one."""
    rank_peaks_gb: list[float] | None = None
    """Each rank's memory peak, rank 0 first, where the records hold them."""
    memory_bounds_gb: tuple[float, float] = (0.0, 0.0)
    cpu_bounds: tuple[float, float] = (0.1, 1.0)
    image: str | None = None
    sla_time_s: float | None = None
    predicted_time_s: float | None = None
    comment: str = ""

    @property
    def distributed(self) -> bool:
        return self.launcher == "torchrun"

    @property
    def uses_loader_workers(self) -> bool:
        """Workers set above 0, or a workers flag whose default is not known."""
        if self.loader_workers is not None:
            return self.loader_workers > 0
        return bool(self.workers_flag)

    def rank_memory_gb(self) -> list[float] | None:
        """Each rank's memory need (its peak with the margin), or None where not recorded."""
        peaks = [p for p in self.rank_peaks_gb or () if p and p > 0]
        if len(peaks) != int(self.allocation.replicas):
            return None
        return [right_size_memory(p) for p in peaks]


def per_worker_env(env: dict[str, str], alloc: Allocation) -> dict[str, str]:
    """``env`` with each data-parallel worker's threads: its share of the job's cores."""
    out = dict(env)
    threads = str(max(int(alloc.cpus) // max(int(alloc.replicas), 1), 1))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if var in out:
            out[var] = threads
    return out


def job_command(shape: JobShape) -> list[str]:
    """The single-pod Job's command: the script under torchrun with the measured workers,
    or under python."""
    script = Path(shape.script).name
    if shape.distributed:
        return ["torchrun", "--standalone", f"--nproc-per-node={int(shape.allocation.replicas)}",
                "--max-restarts=0", script]
    return ["python", script]


def write_cluster_outputs(run_dir: Path, shape: JobShape) -> dict[str, Path]:
    """``k8s-job.yaml``, and for a data-parallel pick ``trainjob.yaml`` and
    ``ray_train_job.py``, in ``run_dir``; their paths by key."""
    alloc = shape.allocation
    paths = {"k8s_job": run_dir / "k8s-job.yaml"}
    # Under torchrun each rank of the one pod runs its share of the cores, as in the trials.
    env = per_worker_env(shape.env, alloc) if shape.distributed else dict(shape.env)
    atomic_write_text(paths["k8s_job"], k8s_job_yaml(
        alloc, env, name=shape.name, command=job_command(shape),
        args=shape.args or None, image=shape.image, memory_bounds_gb=shape.memory_bounds_gb,
        cpu_bounds=shape.cpu_bounds, comment=shape.comment, sla_time_s=shape.sla_time_s,
        predicted_time_s=shape.predicted_time_s,
        shm=shm_size(alloc.memory_gb) if shape.uses_loader_workers else None))
    if not shape.distributed or alloc.replicas < 2:
        return paths
    ranks = shape.rank_memory_gb()
    node_memory = max(ranks) if ranks else node_share(alloc).memory_gb
    paths["trainjob"] = run_dir / "trainjob.yaml"
    atomic_write_text(paths["trainjob"], k8s_trainjob_yaml(
        alloc, per_worker_env(shape.env, alloc), name=shape.name, image=shape.image,
        command=["torchrun", Path(shape.script).name], args=shape.args or None,
        sla_time_s=shape.sla_time_s, predicted_time_s=shape.predicted_time_s,
        rank_memory_gb=ranks,
        shm=shm_size(node_memory) if shape.uses_loader_workers else None))
    paths["ray_train_job"] = run_dir / "ray_train_job.py"
    atomic_write_text(paths["ray_train_job"], ray_train_job_source(
        alloc, per_worker_env(shape.env, alloc), script=str(Path(shape.script).resolve()),
        args=shape.args, name=shape.name, rank_memory_gb=ranks))
    return paths


__all__ = ["JobShape", "job_command", "per_worker_env", "write_cluster_outputs"]

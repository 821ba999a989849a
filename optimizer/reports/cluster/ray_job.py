"""``ray_train_job.py``: a data-parallel recommendation as a Ray Train job.

The script a torchrun job runs calls ``torch.distributed.init_process_group`` itself, from
torchrun's variables. So each worker of the ``TorchTrainer`` runs the script unmodified in a
child process as its rank, the way the trials measured it (:mod:`optimizer.trials.executors.
ray_train`): rank 0 picks its node's address and a free port, Ray Train hands them to every
worker, and each starts ``python SCRIPT ARGS`` with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``
and ``MASTER_PORT`` set, as its node's only rank (``LOCAL_RANK`` 0: Ray gives each worker
only its own GPUs). ``ScalingConfig`` asks for the measured workers with each one's share
of the CPUs, GPUs and memory. The written file needs Ray and Python only, and uses only
Ray's public API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from optimizer.foundation.allocation import Allocation

GIB = 2**30

_TEMPLATE = '''"""Run {script_name} as {workers} data-parallel workers on a Ray cluster (Ray Train).

Written by cloudopt from the recommendation it measured: {workers} workers, each with
{per_worker}. Run it where Ray can reach the cluster (RAY_ADDRESS, or a local Ray):

    python ray_train_job.py

On a remote cluster the script must be there too: set SCRIPT to its path on the nodes, or
submit this file with ``ray job submit --working-dir <the script's folder> -- python
ray_train_job.py``.
"""

import os
import socket
import subprocess
import sys
import tempfile

import ray
from ray import train
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

SCRIPT = {script!r}
ARGS = {args!r}
ENV = {env!r}
NUM_WORKERS = {workers!r}
RESOURCES_PER_WORKER = {resources!r}
USE_GPU = {use_gpu!r}


def _address():
    """This node's address and a port free on it: rank 0's, for torch's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]


def _from_rank_zero(value):
    """Rank 0's value on every worker (Ray Train V2's collective, else torch's group)."""
    try:
        from ray.train.collective import broadcast_from_rank_zero
    except ImportError:
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return broadcast_from_rank_zero(value)


def train_loop(config):
    """One worker: the script as rank ``world_rank`` of ``world_size``, in a child process."""
    context = train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    host, port = _from_rank_zero(_address() if rank == 0 else None)
    env = dict(os.environ, **ENV)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
               GROUP_RANK=str(rank), MASTER_ADDR=str(host), MASTER_PORT=str(port))
    script = os.path.abspath(SCRIPT)
    done = subprocess.run([sys.executable, script, *ARGS], env=env,
                          cwd=os.path.dirname(script), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"rank {{rank}}: {{SCRIPT}} exited {{done.returncode}}")


def _scaling():
    fields = dict(num_workers=NUM_WORKERS, use_gpu=USE_GPU,
                  resources_per_worker=RESOURCES_PER_WORKER)
    try:
        # Train V1 gives its trainer actor a CPU of its own unless told not to; V2 has no
        # such actor and refuses the field.
        return ScalingConfig(trainer_resources={{"CPU": 0}}, **fields)
    except (DeprecationWarning, TypeError, ValueError):
        return ScalingConfig(**fields)


def main():
    ray.init(address=os.environ.get("RAY_ADDRESS"))
    with tempfile.TemporaryDirectory(prefix="ray-train-job-") as storage:
        trainer = TorchTrainer(
            train_loop, scaling_config=_scaling(),
            # The script sets up its own process group; Ray's is only for the handshake.
            torch_config=TorchConfig(backend="gloo"),
            run_config=RunConfig(name={name!r}, storage_path=storage,
                                 failure_config=FailureConfig(max_failures=0)))
        trainer.fit()
    print(f"ray_train_job: {{NUM_WORKERS}} workers of {{SCRIPT}} finished")


if __name__ == "__main__":
    main()
'''


def worker_resources(allocation: Allocation,
                     rank_memory_gb: Sequence[float] | None = None) -> dict[str, float]:
    """``resources_per_worker``: each worker's share of the CPUs and GPUs, and of the memory
    (the largest rank's need where the ranks' own needs are known: Ray places every worker
    with the same ask)."""
    n = max(int(allocation.replicas), 1)
    needs = [float(g) for g in rank_memory_gb or () if g and g > 0]
    memory = max(needs) if len(needs) == n else allocation.memory_gb / n
    out: dict[str, float] = {"CPU": allocation.cpus / n}
    if allocation.gpus:
        out["GPU"] = allocation.gpus / n
    out["memory"] = int(memory * GIB)
    return out


def ray_train_job_source(allocation: Allocation, env: Mapping[str, str], *, script: str | Path,
                         args: Sequence[str] = (), name: str = "cloudopt-ddp",
                         rank_memory_gb: Sequence[float] | None = None) -> str:
    """The text of ``ray_train_job.py`` for ``allocation`` (``replicas`` workers)."""
    resources = worker_resources(allocation, rank_memory_gb)
    per_worker = ", ".join(
        f"{v / GIB:.2f} GB memory" if k == "memory" else f"{v:g} {k}"
        for k, v in resources.items())
    return _TEMPLATE.format(
        script_name=Path(script).name, workers=int(allocation.replicas), per_worker=per_worker,
        script=str(script), args=[str(a) for a in args],
        env={str(k): str(v) for k, v in sorted(env.items())}, resources=resources,
        use_gpu=allocation.gpus > 0, name=name)


__all__ = ["ray_train_job_source", "worker_resources"]

"""The allocation a trial or an environment step runs with: GPUs, CPU threads, memory, batch
and (for scripts that take them) data-loader workers.

Part of the foundation (with :mod:`optimizer.foundation.errors`, :mod:`optimizer.foundation.config`,
:mod:`optimizer.foundation.atomic_files` and :mod:`optimizer.foundation.gpu`): every part of the project may import
it, and it imports nothing of the project but the foundation's :func:`memory_words`.

:meth:`Allocation.key` names a setting for file names and tables (``g0-c2-m8-b128``); what a
person reads says it in words (:func:`describe_allocation`: ``2 CPUs, 8 GB, batch 128``) and
gives a setting's objective as the job's dollars and seconds (:func:`job_words`), never as a
trial id or a bare objective.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from optimizer.foundation.memory import memory_words


@dataclass
class Allocation:
    """The resources one trial (or one environment step) runs with."""

    gpus: int = 0
    cpus: int = 1
    memory_gb: float = 4.0
    batch_size: int | None = None
    """None: the script's own default batch size."""
    workers: int | None = None
    """Data-loader workers; None: the script's own default (the only value the workload model
    and the agents know: only the closed loop's last sweep sets it)."""
    replicas: int = 1
    """Data-parallel worker processes (torchrun's ranks). ``gpus``, ``cpus`` and ``memory_gb``
    are the whole job's, split evenly between them; ``batch_size`` is each worker's, so the
    global batch is ``batch_size * replicas``."""

    @property
    def global_batch(self) -> int | None:
        """The samples of one step of the whole job (each worker's batch times the workers):
        the batch whose statistical efficiency counts."""
        return None if self.batch_size is None else int(self.batch_size) * int(self.replicas)

    def key(self) -> str:
        bs = "default" if self.batch_size is None else str(self.batch_size)
        w = "" if self.workers is None else f"-w{self.workers}"
        r = "" if self.replicas == 1 else f"-r{self.replicas}"
        return f"g{self.gpus}-c{self.cpus}-m{self.memory_gb:g}-b{bs}{w}{r}"


def _plural(n: float, one: str, many: str | None = None) -> str:
    return f"{n:g} {one if n == 1 else (many or one + 's')}"


def describe_allocation(allocation: Allocation | Mapping[str, Any], *, gpus: bool = False) -> str:
    """A setting as people say it: ``1 CPU, 0.5 GB, batch 1024``, ``1 GPU, 4 CPUs, 12.75 GB,
    batch 128, 4 data-loader workers``. GPUs are named when there are some, or with ``gpus``
    (a job that uses GPUs, where "0 GPUs" is worth saying); workers only where set."""
    if isinstance(allocation, Allocation):
        a = allocation
    else:  # a record's dict may carry more than the allocation (a table row, say)
        names = {f.name for f in fields(Allocation)}
        a = Allocation(**{k: v for k, v in allocation.items() if k in names})
    parts = [_plural(a.gpus, "GPU")] if a.gpus or gpus else []
    batch = "the script's own batch" if a.batch_size is None else f"batch {int(a.batch_size)}"
    if a.replicas > 1:
        batch += " per worker"
    parts += [_plural(a.cpus, "CPU"), memory_words(a.memory_gb), batch]
    if a.replicas > 1:
        parts.insert(0, _plural(a.replicas, "DDP worker"))
    if a.workers is not None:
        parts.append(workers_words(a.workers))
    return ", ".join(parts)


def workers_words(n: int) -> str:
    """``no data-loader workers``, ``1 data-loader worker``, ``4 data-loader workers``."""
    return "no data-loader workers" if n == 0 else _plural(n, "data-loader worker")


def money_words(value: float) -> str:
    """``$0.0021``, ``$0.0000689``, ``$12.35``: three significant digits below a dollar (where
    two settings' costs differ in the third), cents above."""
    v = float(value)
    if not math.isfinite(v):
        return "an unknown cost"
    if abs(v) >= 1:
        return f"${v:,.2f}"
    if v == 0:
        return "$0"
    digits = max(2, 2 - math.floor(math.log10(abs(v))))
    text = f"{v:.{digits}f}".rstrip("0")
    return "$" + text + "0" * max(0, 2 - len(text.partition(".")[2]))


def seconds_words(seconds: float) -> str:
    """``7.4 s``, ``41 s``, ``12.5 min``, ``3.2 h``."""
    s = float(seconds)
    if not math.isfinite(s):
        return "an unknown time"
    if s < 10:
        return f"{s:.1f} s"
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:,.1f} h"


def job_words(cost: float, seconds: float, *, whole: bool = True) -> str:
    """A setting's objective as people weigh it: ``$0.0021 and 41 s for the whole job``."""
    return f"{money_words(cost)} and {seconds_words(seconds)}" + (
        " for the whole job" if whole else "")

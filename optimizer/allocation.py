"""The allocation a trial or an environment step runs with: GPUs, CPU threads, memory, batch.

Part of the foundation (with :mod:`optimizer.errors`, :mod:`optimizer.config`,
:mod:`optimizer.atomic_files` and :mod:`optimizer.gpu`): every part of the project may import
it, and it imports nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Allocation:
    """The resources one trial (or one environment step) runs with."""

    gpus: int = 0
    cpus: int = 1
    memory_gb: float = 4.0
    batch_size: int | None = None
    """None: the script's own default batch size."""

    def key(self) -> str:
        bs = "default" if self.batch_size is None else str(self.batch_size)
        return f"g{self.gpus}-c{self.cpus}-m{self.memory_gb:g}-b{bs}"

"""Allocation grid and the discrete resource actions of :class:`envs.CloudEnvironment`.

An allocation is a point of a grid: GPUs in steps of one, CPU threads in steps of ``cpu_step``,
memory in steps of ``ResourceConfig.memory_step`` GB, batch sizes as powers of two, all within
the bounds of :class:`optimizer.foundation.config.ResourceConfig`. An action moves each resource one grid
level down, keeps it, or moves it up; GPU x CPU x memory gives the 27 actions of the original
design, and batch size halve/keep/double makes 81. A move past a bound keeps the resource where
it is.

Action index layout (``d = delta + 1`` in {0, 1, 2})::

    index = ((d_gpu * 3 + d_cpu) * 3 + d_mem) * 3 + d_batch     # 81 actions
    index = (d_gpu * 3 + d_cpu) * 3 + d_mem                     # 27 actions (batch kept)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import ConfigError

RESOURCES = ("gpus", "cpus", "memory_gb", "batch_size")


def powers_of_two(lo: int, hi: int) -> list[int]:
    """Powers of two in ``[lo, hi]`` (at least ``lo`` itself when none lies inside)."""
    if lo < 1 or hi < lo:
        raise ConfigError(f"batch size bounds must satisfy 1 <= min <= max (got {lo}, {hi})")
    out = [1 << k for k in range(0, 31) if lo <= (1 << k) <= hi]
    return out or [lo]


@dataclass
class ResourceGrid:
    """Allocation levels of each resource; an allocation is an index into their product."""

    gpus: np.ndarray
    cpus: np.ndarray
    memory_gb: np.ndarray
    batch_size: np.ndarray

    @classmethod
    def from_config(
        cls,
        resources: ResourceConfig,
        *,
        cpu_step: int = 1,
        batch_sizes: Sequence[int] = (64,),
        gpu_range: tuple[int, int] | None = None,
    ) -> ResourceGrid:
        """Grid from resource bounds; ``gpu_range`` overrides the GPU bounds (e.g. ``(0, 0)``)."""
        glo, ghi = (
            gpu_range
            if gpu_range is not None
            else (resources.gpu_count_min, resources.gpu_count_max)
        )
        if cpu_step < 1:
            raise ConfigError(f"cpu_step must be >= 1 (got {cpu_step!r})")
        mem = np.arange(resources.memory_min, resources.memory_max + 1e-9, resources.memory_step)
        batches = sorted({int(b) for b in batch_sizes})
        if not batches or batches[0] < 1:
            raise ConfigError(f"batch sizes must be positive integers (got {batch_sizes!r})")
        return cls(
            gpus=np.arange(glo, ghi + 1, dtype=np.int64),
            cpus=np.arange(
                resources.cpu_count_min, resources.cpu_count_max + 1, cpu_step, dtype=np.int64
            ),
            memory_gb=np.round(mem, 6),
            batch_size=np.array(batches, dtype=np.int64),
        )

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self.gpus), len(self.cpus), len(self.memory_gb), len(self.batch_size))

    @property
    def n(self) -> int:
        return int(np.prod(self.shape))

    def levels(self) -> np.ndarray:
        """Level indices of every allocation, shape ``(n, 4)``."""
        return np.stack(np.unravel_index(np.arange(self.n), self.shape), axis=1)

    def values(self) -> dict[str, np.ndarray]:
        """Resource values of every allocation, each of shape ``(n,)``."""
        lv = self.levels()
        return {name: getattr(self, name)[lv[:, i]] for i, name in enumerate(RESOURCES)}

    def index_of(self, alloc: Allocation) -> int:
        """Grid index of the nearest allocation (each resource snapped to its closest level)."""
        bs = alloc.batch_size if alloc.batch_size is not None else self.batch_size[0]
        lv = [
            int(np.argmin(np.abs(np.asarray(getattr(self, n), float) - float(v))))
            for n, v in zip(RESOURCES, (alloc.gpus, alloc.cpus, alloc.memory_gb, bs), strict=False)
        ]
        return int(np.ravel_multi_index(lv, self.shape))

    def allocation(self, index: int) -> Allocation:
        g, c, m, b = np.unravel_index(int(index), self.shape)
        return Allocation(
            gpus=int(self.gpus[g]),
            cpus=int(self.cpus[c]),
            memory_gb=float(self.memory_gb[m]),
            batch_size=int(self.batch_size[b]),
        )


class ResourceAction:
    """Discrete actions over the allocation grid (the design's ``ResourceAction``).

    Parameters
    ----------
    resource_config : ResourceConfig
        Bounds and step sizes.
    grid : ResourceGrid, optional
        The allocation grid; built from ``resource_config`` when omitted.
    batch_actions : bool
        81 actions (with batch halve/keep/double) when True, the design's 27 when False.
    """

    gpu_actions = (-1, 0, 1)
    cpu_actions = (-1, 0, 1)
    memory_actions = (-1, 0, 1)

    def __init__(
        self,
        resource_config: ResourceConfig,
        grid: ResourceGrid | None = None,
        batch_actions: bool = True,
    ) -> None:
        self.resource_config = resource_config
        self.grid = grid if grid is not None else ResourceGrid.from_config(resource_config)
        self.batch_actions_enabled = bool(batch_actions)
        self.batch_actions = (-1, 0, 1) if batch_actions else (0,)
        self.action_dim = 27 * len(self.batch_actions)
        self.noop = self.action_dim // 2
        deltas = np.array([self._deltas(a) for a in range(self.action_dim)], dtype=np.int64)
        self._deltas_table = deltas

    def _deltas(self, action: int) -> tuple[int, int, int, int]:
        if not 0 <= action < self.action_dim:
            raise ValueError(f"action must be in [0, {self.action_dim}) (got {action!r})")
        nb = len(self.batch_actions)
        db = action % nb
        rest = action // nb
        return (rest // 9 - 1, (rest // 3) % 3 - 1, rest % 3 - 1, db - 1 if nb == 3 else 0)

    def action_to_changes(self, action: int) -> dict[str, float]:
        """Changes an action asks for: GPUs, CPUs and memory GB added (negative: removed) and
        the batch-size factor (0.5, 1 or 2), before bounds are applied."""
        dg, dc, dm, db = self._deltas(int(action))
        cpu_step = int(self.grid.cpus[1] - self.grid.cpus[0]) if len(self.grid.cpus) > 1 else 1
        return {
            "gpus": dg,
            "cpus": dc * cpu_step,
            "memory_gb": dm * float(self.resource_config.memory_step),
            "batch_factor": 2.0**db,
        }

    def next_index_table(self) -> np.ndarray:
        """Grid index after each action from each allocation, shape ``(n_alloc, action_dim)``."""
        lv = self.grid.levels()
        new = lv[:, None, :] + self._deltas_table[None, :, :]
        new = np.clip(new, 0, np.array(self.grid.shape) - 1)
        return np.ravel_multi_index(tuple(np.moveaxis(new, -1, 0)), self.grid.shape)

    def compute_new_allocation(self, action: int, current: Allocation) -> Allocation:
        """The allocation an action leads to from ``current`` (snapped to the grid)."""
        lv = np.array(np.unravel_index(self.grid.index_of(current), self.grid.shape))
        new = np.clip(lv + self._deltas_table[int(action)], 0, np.array(self.grid.shape) - 1)
        return self.grid.allocation(int(np.ravel_multi_index(tuple(new), self.grid.shape)))

    def get_action_description(self, action: int) -> str:
        """E.g. ``Increase GPUs by 1, keep CPUs, decrease memory by 8 GB, double batch size``."""
        ch = self.action_to_changes(action)
        parts = []
        for key, label, unit in (
            ("gpus", "GPUs", ""),
            ("cpus", "CPUs", ""),
            ("memory_gb", "memory", " GB"),
        ):
            v = ch[key]
            if v == 0:
                parts.append(f"keep {label}")
            else:
                verb = "increase" if v > 0 else "decrease"
                parts.append(f"{verb} {label} by {abs(v):g}{unit}")
        if self.batch_actions_enabled:
            parts.append(
                {0.5: "halve batch size", 1.0: "keep batch size", 2.0: "double batch size"}[
                    ch["batch_factor"]
                ]
            )
        text = ", ".join(parts)
        return text[0].upper() + text[1:]

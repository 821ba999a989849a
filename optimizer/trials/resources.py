"""Turning an allocation into the environment and CPU affinity a training run gets.

:meth:`ResourceManager.apply_configuration` maps an allocation (GPUs, CPUs, batch size) and the
prices of a :class:`~optimizer.foundation.config.ResourceConfig` to environment variables:
``CUDA_VISIBLE_DEVICES`` (GPUs chosen among those visible; ``""`` hides all),
``OMP/MKL/OPENBLAS/NUMEXPR_NUM_THREADS``, ``OPTIMIZER_BATCH_SIZE`` and ``COST_PER_*_HOUR``.
Thread variables are only a hint to the libraries, so CPU counts are also enforced with CPU
affinity (:func:`cpu_affinity_set`, applied to the child by :mod:`optimizer.trials.runner`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import ConfigError

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS")
_ALIASES = {"gpus": ("gpus", "gpu_count"), "cpus": ("cpus", "cpu_count"),
            "batch_size": ("batch_size",), "memory_gb": ("memory_gb", "memory")}


def as_allocation(config: Allocation | Mapping[str, Any]) -> Allocation:
    """An :class:`Allocation` from itself or a mapping (``gpus``/``gpu_count``, ...)."""
    if isinstance(config, Allocation):
        return config
    if not isinstance(config, Mapping):
        raise ConfigError(f"a resource configuration must be an Allocation or a mapping "
                          f"(got {type(config).__name__})")
    kwargs: dict[str, Any] = {}
    for name, keys in _ALIASES.items():
        for k in keys:
            if config.get(k) is not None:
                kwargs[name] = config[k]
                break
    alloc = Allocation(**kwargs)
    for name in ("gpus", "cpus"):
        v = getattr(alloc, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ConfigError(f"{name} must be a non-negative integer (got {v!r})")
    if alloc.cpus < 1:
        raise ConfigError(f"cpus must be >= 1 (got {alloc.cpus!r})")
    if alloc.batch_size is not None and (not isinstance(alloc.batch_size, int)
                                         or alloc.batch_size < 1):
        raise ConfigError(f"batch_size must be a positive integer (got {alloc.batch_size!r})")
    return alloc


def cpu_affinity_set(n_cpus: int, available: Sequence[int] | None = None) -> list[int]:
    """The CPUs a run with ``n_cpus`` CPUs is pinned to: the first ``n_cpus`` of ``available``
    (default: this process's affinity mask). Asking for more than exist gives all of them.
    """
    if available is None:
        try:
            available = sorted(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - macOS/Windows
            available = list(range(os.cpu_count() or 1))
    available = sorted(available)
    if n_cpus < 1:
        raise ConfigError(f"cpus must be >= 1 (got {n_cpus!r})")
    return available[: min(n_cpus, len(available))]


class ResourceManager:
    """Applies allocations: environment variables for GPUs, threads, batch size and prices."""

    @staticmethod
    def apply_configuration(
        config: Allocation | Mapping[str, Any],
        env: Mapping[str, str] | None = None,
        *,
        resource_config: ResourceConfig | Mapping[str, float] | None = None,
        visible_devices: Sequence[int] | None = None,
        mutate: bool = False,
    ) -> dict[str, str]:
        """The environment a run with ``config`` gets.

        Parameters
        ----------
        config : Allocation or mapping
            GPUs, CPUs and batch size (``None`` batch size: the script's default, and
            ``OPTIMIZER_BATCH_SIZE`` is removed).
        env : mapping, optional
            Starting environment (default: a copy of ``os.environ``).
        resource_config : ResourceConfig or mapping, optional
            Prices exported as ``COST_PER_GPU_HOUR`` etc. (a mapping may also carry
            ``cost_per_*`` keys).
        visible_devices : sequence of int, optional
            GPUs to choose from (default: those NVML sees, honouring ``CUDA_VISIBLE_DEVICES``).
        mutate : bool
            Also update ``os.environ`` (never done otherwise).

        Returns
        -------
        dict
            The full environment for the run.

        Raises
        ------
        ConfigError
            When more GPUs are asked for than are visible.
        """
        alloc = as_allocation(config)
        out = dict(os.environ if env is None else env)
        out["CUDA_VISIBLE_DEVICES"] = ResourceManager.select_gpus(alloc.gpus, visible_devices)
        for var in THREAD_VARS:
            out[var] = str(alloc.cpus)
        # OMP_WAIT_POLICY is left as the user's environment has it: a trial measures the job
        # as it runs without cloudopt. PASSIVE (threads sleep at each barrier) doubled a
        # 2-thread LSTM's epochs (2.3 s -> 4.7-5.6 s), and the written Job carried it too.
        if alloc.batch_size is None:
            out.pop("OPTIMIZER_BATCH_SIZE", None)
        else:
            out["OPTIMIZER_BATCH_SIZE"] = str(alloc.batch_size)
        prices = _prices(resource_config if resource_config is not None else config)
        for key, value in prices.items():
            out[f"COST_PER_{key.upper()}_HOUR"] = f"{value:g}"
        if mutate:
            os.environ.update(out)
            if alloc.batch_size is None:
                os.environ.pop("OPTIMIZER_BATCH_SIZE", None)
        return out

    @staticmethod
    def select_gpus(count: int, visible_devices: Sequence[int] | None = None) -> str:
        """``CUDA_VISIBLE_DEVICES`` for ``count`` GPUs: the first ``count`` visible ones."""
        if count == 0:
            return ""
        if visible_devices is None:
            from optimizer.foundation.gpu import visible_device_indices

            visible_devices = visible_device_indices()
        if count > len(visible_devices):
            raise ConfigError(f"{count} GPU(s) requested but {len(visible_devices)} visible")
        return ",".join(str(i) for i in list(visible_devices)[:count])


def _prices(source: Any) -> dict[str, float]:
    names = {"gpu": "cost_per_gpu_hour", "cpu": "cost_per_cpu_hour", "gb": "cost_per_gb_hour"}
    if isinstance(source, ResourceConfig):
        return {k: float(getattr(source, v)) for k, v in names.items()}
    if isinstance(source, Mapping):
        return {k: float(source[v]) for k, v in names.items() if source.get(v) is not None}
    return {}


def restore_environ(saved: MutableMapping[str, str]) -> None:
    """Put back an ``os.environ`` copy taken before ``apply_configuration(..., mutate=True)``."""
    for k in list(os.environ):
        if k not in saved:
            del os.environ[k]
    os.environ.update(saved)

"""What this machine has: GPUs (through NVML), the CPUs this process may use, and its memory.

Resource bounds left out of a configuration are detected with these.
"""

from __future__ import annotations

import os


def detect_gpu_count() -> int:
    """Number of GPUs NVML sees; 0 without GPUs or without the NVML library (a normal case)."""
    from optimizer.foundation.gpu import nvml_device_count

    return nvml_device_count()


def detect_cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS/Windows
        return os.cpu_count() or 1


def detect_memory_gb() -> float:
    import psutil

    return round(psutil.virtual_memory().total / 1024**3, 2)

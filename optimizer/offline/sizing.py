"""Sizing heuristics for a job that nothing in the logged history resembles.

- GPUs: one when the machine has any and the model is not tiny (>= 1 M parameters or
  unknown): the smallest learner of the FfDL T-shirt table (:data:`TSHIRT_SIZES`).
- CPUs: with a GPU, the T-shirt cores per GPU of its type (V100's row for unknown types; the
  lecture's Table 4 shows throughput flat beyond that); CPU-only, all cores for ``time``, one
  for ``cost``/``resource``, half for ``balanced``.
- Memory: with a GPU, the T-shirt 24 GB per GPU; CPU-only, 16 bytes per parameter (fp32
  weights, gradients, Adam moments) plus 1 GB for the framework and data, with 50 % headroom.
  Everything is clipped to the resource bounds.
- Throughput: ~6 x params FLOPs per sample [Kaplan et al. 2020] at :data:`CPU_FLOPS_PER_CORE`
  per core or :data:`GPU_FLOPS` per GPU, with an uncertainty of a factor of ten (convolutions
  reuse weights and sequences multiply the work, so the estimate is rough); unknown without a
  parameter count.
"""

from __future__ import annotations

import math

import numpy as np

from optimizer.foundation.config import ResourceConfig

# FfDL "T-shirt" sizes (Boag et al., dl-platforms lecture, Table 5): CPU cores and memory (GB)
# recommended per learner with 1 or 2 GPUs of each type. Per GPU this is 4 cores/24 GB on K80,
# 8/24 on P100 and 21-26/24 on V100; newer types use the V100 row (the most CPU-hungry).
TSHIRT_SIZES: dict[str, dict[int, tuple[int, int]]] = {
    "K80": {1: (4, 24), 2: (8, 48), 4: (16, 96)},
    "P100": {1: (8, 24), 2: (16, 48)},
    "V100": {1: (26, 24), 2: (42, 48)},
}
BYTES_PER_PARAM_TRAINING = 16
"""fp32 weights, gradients and two Adam moments: 4 x 4 bytes per parameter."""
FRAMEWORK_MEMORY_GB = 1.0
"""Resident memory of a Python process with torch loaded and a small in-memory data set."""
CPU_FLOPS_PER_CORE = 2e9
"""Sustained FLOP/s of one core on small eager-mode PyTorch models (well below peak)."""
GPU_FLOPS = 2e12
"""Sustained FLOP/s of one data-centre GPU on small models (~10 % of a V100's fp32 peak)."""


def default_size(resources: ResourceConfig, params: float,
                 preference: str) -> tuple[int, int, float]:
    """GPUs, CPU cores and memory (GB) for a job of ``params`` parameters (NaN: unknown)."""
    r = resources
    use_gpu = (r.gpu_count_max or 0) >= 1 and not (params < 1e6)
    if use_gpu:
        gpu_type = _gpu_type()
        cores, mem = TSHIRT_SIZES.get(gpu_type, TSHIRT_SIZES["V100"])[1]
        gpus = 1
    else:
        gpus = 0
        n = r.cpu_count_max or 1
        cores = {"time": n, "cost": 1, "resource": 1}.get(preference, max(1, n // 2))
        mem = heuristic_memory_gb(params)
    cores = int(min(max(cores, r.cpu_count_min), r.cpu_count_max or cores))
    mem = float(min(max(math.ceil(mem * 2) / 2, r.memory_min), r.memory_max or mem))
    return gpus, cores, mem


def rough_throughput(params: float, gpus: int, cores: int) -> float:
    """Samples/s from ~6 x params FLOPs per sample; NaN without a parameter count."""
    flops = GPU_FLOPS * gpus if gpus else CPU_FLOPS_PER_CORE * cores
    return flops / (6 * params) if np.isfinite(params) and params > 0 else math.nan


def heuristic_memory_gb(params: float) -> float:
    """CPU-job memory: 16 bytes per parameter plus 1 GB of framework and data, +50 %."""
    param_gb = (params if np.isfinite(params) else 0.0) * BYTES_PER_PARAM_TRAINING / 1e9
    return 1.5 * (param_gb + FRAMEWORK_MEMORY_GB)


def _gpu_type() -> str:
    """The T-shirt row for the first visible GPU: K80, P100 or V100 (V100 for others)."""
    try:
        from optimizer.foundation.gpu import _nvml

        nvml = _nvml()
        if nvml is None:
            return "V100"
        name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
        name = name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no NVML, no device: the default row is the answer
        return "V100"
    return next((t for t in TSHIRT_SIZES if t in name.upper()), "V100")

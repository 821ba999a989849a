"""NVML access that treats "no GPU" and "no NVML library" as the normal case, not an error."""

from __future__ import annotations

import os
import threading
from typing import Any

_lock = threading.Lock()
_state: dict[str, object] = {"init": None}


def _nvml():
    """The initialised ``pynvml`` module, or None when NVML is unavailable."""
    with _lock:
        if _state["init"] is False:
            return None
        try:
            import pynvml

            if _state["init"] is None:
                pynvml.nvmlInit()
                _state["init"] = True
            return pynvml
        except Exception:  # no library, no driver, no device: all mean "no GPU here"
            _state["init"] = False
            return None


def nvml_device_count() -> int:
    nv = _nvml()
    if nv is None:
        return 0
    try:
        return int(nv.nvmlDeviceGetCount())
    except Exception:
        return 0


def visible_device_indices() -> list[int]:
    """Physical indices of the GPUs this process may use (honours CUDA_VISIBLE_DEVICES)."""
    count = nvml_device_count()
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(count))
    out = []
    for part in spec.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < count:
            out.append(int(part))
        elif part and not part.isdigit():
            return []  # UUIDs or garbage: treat as unknown rather than guess
        else:
            break  # CUDA stops at the first invalid index
    return out


def _read_each(indices: list[int] | None, read) -> list[float]:
    """``read(pynvml, handle)`` of each GPU in ``indices`` (default: the visible ones); a GPU
    whose reading fails is left out, and there are none without NVML."""
    nv = _nvml()
    if nv is None:
        return []
    out = []
    for i in visible_device_indices() if indices is None else indices:
        try:
            out.append(float(read(nv, nv.nvmlDeviceGetHandleByIndex(i))))
        except Exception:  # a GPU that went away or is busy resetting: no reading this time
            continue
    return out


def gpu_utilization(indices: list[int] | None = None) -> list[float]:
    """Utilisation (%) of each GPU in ``indices`` (default: visible ones); [] without NVML."""
    return _read_each(indices, lambda nv, h: nv.nvmlDeviceGetUtilizationRates(h).gpu)


def gpu_memory_used_gb(indices: list[int] | None = None) -> list[float]:
    """Memory in use (GB) on each GPU in ``indices``; [] without NVML."""
    return _read_each(indices, lambda nv, h: nv.nvmlDeviceGetMemoryInfo(h).used / 1024**3)


def gpu_consistency() -> dict[str, Any]:
    """Whether CUDA, ``CUDA_VISIBLE_DEVICES`` and NVML agree on the GPUs this job can use:
    what each sees, ``consistent``, and one line per disagreement (``issues``)."""
    try:
        import torch

        cuda = bool(torch.cuda.is_available())
        torch_count = torch.cuda.device_count() if cuda else 0
    except Exception:  # a broken CUDA install must not stop a CPU-only optimization
        cuda, torch_count = False, 0
    nvml = nvml_device_count()
    visible = visible_device_indices()
    issues = []
    if nvml and not cuda:
        issues.append(f"NVML sees {nvml} GPU(s) but torch.cuda is not available "
                      "(CPU-only torch build or driver mismatch)")
    if cuda and torch_count != len(visible):
        issues.append(f"torch sees {torch_count} GPU(s) but CUDA_VISIBLE_DEVICES/NVML give "
                      f"{len(visible)}")
    return {"cuda_available": cuda, "torch_device_count": torch_count,
            "nvml_device_count": nvml, "visible_devices": visible,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "consistent": not issues, "issues": issues}

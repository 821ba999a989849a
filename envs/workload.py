"""Workload model: throughput, memory and utilisation of a training job for an allocation.

The step-time model follows Pollux (Qiao et al., OSDI'21, "Pollux: Co-adaptive Cluster Scheduling
for Goodput-Optimized Deep Learning"), extended with CPU threads and host memory:

* per-replica compute time, linear in the local batch ``b = B / max(g, 1)``::

      T_c = alpha_c + beta_c * b

* all-reduce synchronisation, zero on one GPU and growing with the GPU count ``g``::

      T_s = alpha_r + beta_r * max(g - 2, 0)          (g > 1)

* compute and synchronisation overlap through Pollux's learned exponent ``gamma`` (1: no
  overlap, large: perfect overlap)::

      T_gs = (T_c**gamma + T_s**gamma) ** (1 / gamma)

* the input pipeline runs on ``c`` CPU threads with Amdahl's law (parallel fraction ``p``); its
  work is ``W_d = delta * B * cpu_scale`` single-thread seconds per iteration, so it takes
  ``T_d = W_d * ((1 - p) + p / c)``. Prefetching overlaps it with the GPU step; a fixed soft
  maximum (exponent ``KAPPA``) keeps the fit smooth::

      T = (T_gs**KAPPA + T_d**KAPPA) ** (1 / KAPPA)

* a CPU-only workload computes on the threads themselves, and each thread beyond the first adds
  ``sync_c`` seconds of fork/join per step (intra-op parallelism hands every operator's work to
  the threads and waits for them): ``T = (alpha_c + beta_c * B) * cpu_scale * ((1 - p) + p / c)
  + sync_c * (c - 1)``. With ``sync_c > 0`` a small batch can run slower on more threads, as
  small CNN steps did on a 2-core machine (batch 16: 13.4 s per job on 1 CPU, 15.7 s on 2).
  ``r`` data-parallel CPU workers (torchrun's ranks) each run that on ``c / r`` threads and a
  local batch ``B / r``, then synchronise as GPUs do: ``T = (T_c**gamma + T_s(r)**gamma) **
  (1 / gamma)``, with ``T_s`` fitted from the measured multi-worker trials
  (:func:`optimizer.search.after_loop.scaling.fit_sync`).

Throughput is ``B / T`` samples per second. A batch-size change also changes statistical
efficiency (progress per sample). We use the gradient-noise-scale form that Pollux builds on
(McCandlish et al., 2018): relative to a reference batch ``B0``, a sample at batch ``B`` is worth::

      E(B) = (phi + B0) / (phi + B)

of a sample at ``B0``, where ``phi`` is the gradient noise scale in samples (``phi = 0`` switches
the effect off). *Goodput* ``= throughput * E(B)`` is the job's progress rate in reference
samples per second.

Host memory is linear in the batch size, ``(m0 + m1 * B) * mem_scale``; GPU memory is linear in the
local batch; exceeding either is out of memory. GPU utilisation is the compute share of the step,
``gpu_util_max * T_c / T``; CPU utilisation is the busy share of the allocated threads.

Phases scale the CPU work (``cpu_scale``) and host memory (``mem_scale``) over the job's
progress; a phase sequence is a list of ``(phase_id, fraction)`` pairs, as the phase detector's
prototypes give them.

:func:`optimizer.search.workload_fit.fit_workload_model` calibrates the parameters from a table of
measurements by least squares on log step time (Pollux fits the same way) and refuses, with a
message naming what is missing, when the measurements cannot identify them. This module only
takes parameters: it knows nothing of how they were measured.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.config import CONFIG_DIR
from optimizer.foundation.errors import CloudoptError, ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PRESET_DIR = CONFIG_DIR / "workloads"
KAPPA = 5.0
"""Soft-maximum exponent combining the input pipeline with the GPU step (prefetch overlap)."""


@dataclass
class WorkloadParams:
    """Parameters of the workload model (seconds, samples, GB); see the module docstring."""

    device: str = "gpu"
    """``gpu`` (replicas on GPUs, CPU threads feed the input pipeline) or ``cpu`` (CPU-only)."""
    alpha_c: float = 0.02
    """Constant compute time per iteration, s."""
    beta_c: float = 0.003
    """Compute time per sample of the local batch, s (single thread for ``cpu``)."""
    alpha_r: float = 0.0
    """Constant all-reduce time with more than one GPU, s."""
    beta_r: float = 0.0
    """All-reduce retrogression per GPU beyond two, s."""
    gamma: float = 1.0
    """Pollux overlap exponent of compute and synchronisation, in [1, 10]."""
    delta: float = 0.0
    """Single-thread input-pipeline time per sample, s (``gpu`` device)."""
    parallel_fraction: float = 0.9
    """Amdahl parallel fraction of the CPU work."""
    sync_c: float = 0.0
    """Thread synchronisation per step and per CPU thread beyond the first, s (``cpu`` device)."""
    host_cores_per_gpu: float = 0.0
    """CPU cores each GPU's driver thread keeps busy."""
    gpu_util_max: float = 1.0
    """GPU utilisation reached when compute bound (kernel gaps keep it below 1)."""
    mem_base_gb: float = 1.0
    mem_per_sample_gb: float = 0.0
    gpu_mem_gb: float = 0.0
    """Memory of one GPU, GB; 0 skips the GPU out-of-memory check."""
    gpu_mem_base_gb: float = 0.0
    gpu_mem_per_sample_gb: float = 0.0
    noise_scale: float = 0.0
    """Gradient noise scale ``phi`` in samples; 0 switches statistical efficiency off."""
    ref_batch: int = 64
    """Batch size ``B0`` at which the job's work is counted."""

    def __post_init__(self) -> None:
        if self.device not in ("gpu", "cpu"):
            raise ConfigError(f"[model].device must be 'gpu' or 'cpu' (got {self.device!r})")
        for name in (
            "alpha_c",
            "beta_c",
            "alpha_r",
            "beta_r",
            "delta",
            "host_cores_per_gpu",
            "mem_base_gb",
            "mem_per_sample_gb",
            "gpu_mem_gb",
            "gpu_mem_base_gb",
            "gpu_mem_per_sample_gb",
            "noise_scale",
            "sync_c",
        ):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"[model].{name} must be >= 0 (got {getattr(self, name)!r})")
        if self.alpha_c + self.beta_c <= 0:
            raise ConfigError("[model] alpha_c and beta_c cannot both be 0 (no compute time)")
        if not 1.0 <= self.gamma <= 10.0:
            raise ConfigError(f"[model].gamma must be in [1, 10] (got {self.gamma!r})")
        if not 0.0 <= self.parallel_fraction <= 1.0:
            raise ConfigError(
                f"[model].parallel_fraction must be in [0, 1] (got {self.parallel_fraction!r})"
            )
        if not 0.0 < self.gpu_util_max <= 1.0:
            raise ConfigError(f"[model].gpu_util_max must be in (0, 1] (got {self.gpu_util_max!r})")
        if not self.ref_batch >= 1:
            raise ConfigError(f"[model].ref_batch must be >= 1 (got {self.ref_batch!r})")


@dataclass(frozen=True)
class PhaseSpec:
    """One phase of the workload: its share of the job and its CPU/memory demand scales."""

    phase_id: int
    fraction: float
    cpu_scale: float = 1.0
    mem_scale: float = 1.0
    name: str = ""
    parallel: float | None = None
    """The phase's own Amdahl parallel fraction (None: the model's ``parallel_fraction``): a
    single-threaded data preparation or evaluation gains nothing from more cores while
    training does."""


def phase_sequence(phases: Sequence[PhaseSpec], n_steps: int) -> np.ndarray:
    """Index into ``phases`` of the phase each of ``n_steps`` equal chunks runs in.

    A chunk belongs to the phase that covers its midpoint on the progress axis. Returns an int
    array of shape ``(n_steps,)``.
    """
    ends = np.cumsum([p.fraction for p in phases])
    ends = ends / ends[-1]
    mids = (np.arange(n_steps) + 0.5) / n_steps
    return np.minimum(np.searchsorted(ends, mids, side="right"), len(phases) - 1)


def phases_from_prototype(
    prototype: Sequence[tuple[int, float]],
    scales: Mapping[int, tuple[float, float]] | Sequence[PhaseSpec] | None = None,
) -> list[PhaseSpec]:
    """Phases from a phase detector's prototype, a list of ``(phase_id, fraction)`` pairs.

    ``scales`` gives ``(cpu_scale, mem_scale)`` per phase id (or known :class:`PhaseSpec`s whose
    scales are reused); ids without one keep a scale of 1.
    """
    if not prototype:
        raise ConfigError("phase sequence is empty; give (phase_id, fraction) pairs")
    table: dict[int, tuple[float, float]] = {}
    if scales is not None:
        if isinstance(scales, Mapping):
            table = {int(k): (float(v[0]), float(v[1])) for k, v in scales.items()}
        else:
            table = {p.phase_id: (p.cpu_scale, p.mem_scale) for p in scales}
    out = []
    for item in prototype:
        try:
            pid, frac = int(item[0]), float(item[1])
        except (TypeError, ValueError, IndexError):
            raise ConfigError(f"phase sequence item {item!r} is not (phase_id, fraction)") from None
        if not frac > 0:
            raise ConfigError(f"phase {pid} has fraction {frac!r}; fractions must be > 0")
        cpu, mem = table.get(pid, (1.0, 1.0))
        out.append(PhaseSpec(pid, frac, cpu, mem))
    return out


def phases_from_labels(
    labels: Sequence[int] | np.ndarray,
    stats: Any = None,
    *,
    cpu_feature: str = "cpu_cores",
    mem_feature: str = "mem_gb",
) -> list[PhaseSpec]:
    """Phases of one execution labelled by the phase detector (``PhaseDetector.predict``).

    Runs of one label become phases whose fraction is their share of the samples (warm-up
    samples, label -1, are left out). With ``stats`` (the ``phases.sequences.phase_stats``
    frame: ``phase, feature, mean`` rows) each phase's CPU and memory scales are its mean of
    ``cpu_feature`` / ``mem_feature`` relative to the execution's sample-weighted mean, so the
    job's average demand stays what the workload model says.
    """
    seq = np.asarray(labels, dtype=np.int64)
    seq = seq[seq >= 0]
    if seq.size == 0:
        raise ConfigError("phase labels are empty (or all warm-up)")
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    lengths = np.diff(np.r_[starts, seq.size])
    ids = seq[starts]
    scales = {int(i): (1.0, 1.0) for i in ids}
    if stats is not None:
        means = {}
        for feat in (cpu_feature, mem_feature):
            rows = stats[stats["feature"] == feat]
            if rows.empty:
                raise ConfigError(f"phase statistics have no feature {feat!r}")
            means[feat] = dict(
                zip(rows["phase"].astype(int), rows["mean"].astype(float), strict=True)
            )
        overall = {
            f: sum(m.get(int(i), 0.0) * n for i, n in zip(ids, lengths, strict=True)) / seq.size
            for f, m in means.items()
        }
        scales = {
            int(i): tuple(
                means[f].get(int(i), overall[f]) / overall[f] if overall[f] > 0 else 1.0
                for f in (cpu_feature, mem_feature)
            )
            for i in ids
        }
    return [
        PhaseSpec(int(i), float(n) / seq.size, *scales[int(i)])
        for i, n in zip(ids, lengths, strict=True)
    ]


@dataclass
class FitReport:
    """Goodness of fit of :func:`optimizer.search.workload_fit.fit_workload_model`."""

    n_trials: int
    free: list[str]
    fixed: dict[str, str]
    """Parameters the trials could not inform, with the value's reason."""
    r2_throughput: float
    r2_memory: float
    per_point: list[dict[str, float | str]]
    """One row per trial: ``trial_id``, measured and predicted throughput, relative error."""
    max_rel_error: float
    dof: int
    """Trials minus free throughput parameters; with 0 the R² is 1 by construction."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class WorkloadModel:
    """Predicts step time, throughput, memory and utilisation of a job for allocations.

    Parameters
    ----------
    params : WorkloadParams
        Model parameters (from a preset, by hand, or fitted to measurements).
    phases : list of PhaseSpec
        Phase sequence over the job's progress; one neutral phase by default.
    name : str
        Label (the preset name, or ``fitted``).
    meta : dict
        The rest of a preset (job size, grid, SLA, resources) for :class:`envs.EnvConfig`.

    Attributes
    ----------
    fit_report_ : FitReport
        Set when the parameters were fitted to measurements.
    """

    params: WorkloadParams = field(default_factory=WorkloadParams)
    phases: list[PhaseSpec] = field(default_factory=lambda: [PhaseSpec(0, 1.0)])
    name: str = "custom"
    meta: dict[str, Any] = field(default_factory=dict)
    fit_report_: FitReport | None = None

    # ---------------------------------------------------------------- prediction
    def predict(
        self,
        gpus: Any,
        cpus: Any,
        memory_gb: Any,
        batch_size: Any,
        cpu_scale: Any = 1.0,
        mem_scale: Any = 1.0,
        parallel: Any = None,
        replicas: Any = 1,
    ) -> dict[str, np.ndarray]:
        """Predictions for allocations, broadcast over array arguments.

        Returns a dict of float arrays of the broadcast shape: ``step_time`` (s), ``throughput``
        (samples/s), ``efficiency`` (statistical, relative to ``ref_batch``), ``goodput``
        (reference samples/s), ``mem_gb``, ``gpu_mem_gb`` (per GPU), ``gpu_util``, ``cpu_util``,
        ``mem_util`` (fractions in [0, 1]) and ``oom`` (bool).

        ``replicas`` data-parallel CPU workers split the cores and the batch (``batch_size`` is
        the global one): each computes its share on its cores, then they synchronise
        (``alpha_r + beta_r * max(r - 2, 0)``, combined through ``gamma`` as for GPUs).
        """
        p = self.params
        g, c, m, b_total = (np.asarray(x, dtype=float) for x in (gpus, cpus, memory_gb, batch_size))
        cpu_scale = np.asarray(cpu_scale, dtype=float)
        mem_scale = np.asarray(mem_scale, dtype=float)
        par = p.parallel_fraction if parallel is None else np.asarray(parallel, dtype=float)
        amdahl = (1.0 - par) + par / c
        if p.device == "cpu":
            r = np.maximum(np.asarray(replicas, dtype=float), 1.0)
            cw = np.maximum(c / r, 1.0)  # each worker's cores
            work = (p.alpha_c + p.beta_c * b_total / r) * cpu_scale
            t_compute = work * ((1.0 - par) + par / cw) + p.sync_c * np.maximum(cw - 1.0, 0.0)
            t_sync = np.where(r > 1, p.alpha_r + p.beta_r * np.maximum(r - 2.0, 0.0), 0.0)
            step = (t_compute**p.gamma + t_sync**p.gamma) ** (1.0 / p.gamma)
            work = work * r
            gpu_util = np.zeros_like(step)
            cpu_util = np.minimum(1.0, work / (c * step))
            local = b_total
        else:
            replicas = np.maximum(g, 1.0)
            local = b_total / replicas
            t_compute = p.alpha_c + p.beta_c * local
            t_sync = np.where(g > 1, p.alpha_r + p.beta_r * np.maximum(g - 2.0, 0.0), 0.0)
            t_gs = (t_compute**p.gamma + t_sync**p.gamma) ** (1.0 / p.gamma)
            work = p.delta * b_total * cpu_scale
            t_data = work * amdahl
            step = (t_gs**KAPPA + t_data**KAPPA) ** (1.0 / KAPPA)
            gpu_util = p.gpu_util_max * t_compute / step
            cpu_util = np.minimum(1.0, (work + p.host_cores_per_gpu * g * step) / (c * step))
        throughput = b_total / step
        eff = self.efficiency(b_total)
        mem = (p.mem_base_gb + p.mem_per_sample_gb * b_total) * mem_scale
        gpu_mem = p.gpu_mem_base_gb + p.gpu_mem_per_sample_gb * local
        oom = mem > m
        if p.device == "gpu" and p.gpu_mem_gb > 0:
            oom = oom | (gpu_mem > p.gpu_mem_gb)
        shape = np.broadcast(g, c, m, b_total, cpu_scale, mem_scale, replicas).shape
        out = {
            "step_time": step,
            "throughput": throughput,
            "efficiency": eff,
            "goodput": throughput * eff,
            "mem_gb": mem,
            "gpu_mem_gb": gpu_mem,
            "gpu_util": gpu_util,
            "cpu_util": cpu_util,
            "mem_util": np.minimum(1.0, mem / m),
            "oom": oom,
            "t_compute": t_compute,
        }
        return {k: np.broadcast_to(v, shape).copy() for k, v in out.items()}

    def efficiency(self, batch_size: Any) -> np.ndarray:
        """Statistical efficiency ``(phi + B0) / (phi + B)`` (1 when ``noise_scale`` is 0)."""
        p = self.params
        b = np.asarray(batch_size, dtype=float)
        if p.noise_scale <= 0:
            return np.ones_like(b)
        return (p.noise_scale + p.ref_batch) / (p.noise_scale + b)

    def predict_trial(self, allocation: Any) -> dict[str, float]:
        """Predictions for one :class:`optimizer.foundation.allocation.Allocation` (first phase's scales)."""
        if allocation.batch_size is None:
            raise CloudoptError("cannot predict an allocation without a batch size")
        ph = self.phases[0]
        out = self.predict(
            allocation.gpus,
            allocation.cpus,
            allocation.memory_gb,
            allocation.batch_size,
            ph.cpu_scale,
            ph.mem_scale,
        )
        return {k: float(v) for k, v in out.items()}

    # ---------------------------------------------------------------- presets
    @classmethod
    def from_preset(cls, name: str | Path) -> WorkloadModel:
        """Load ``configs/workloads/<name>.toml`` (or a path to such a file)."""
        path = Path(name)
        if path.suffix != ".toml":
            path = PRESET_DIR / f"{name}.toml"
        if not path.is_file():
            known = ", ".join(list_presets()) or "none"
            raise ConfigError(f"workload preset {str(name)!r} not found ({path}); known: {known}")
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        try:
            return cls._from_dict(data, path.stem)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any], name: str) -> WorkloadModel:
        known = {f.name for f in dataclasses.fields(WorkloadParams)}
        model = dict(data.get("model", {}))
        unknown = sorted(set(model) - known)
        if unknown:
            raise ConfigError(
                f"unknown key [model].{unknown[0]}; known: {', '.join(sorted(known))}"
            )
        params = WorkloadParams(**model)
        phases = []
        for i, ph in enumerate(data.get("phases", [])):
            try:
                phases.append(
                    PhaseSpec(
                        int(ph.get("id", i)),
                        float(ph["fraction"]),
                        float(ph.get("cpu_scale", 1.0)),
                        float(ph.get("mem_scale", 1.0)),
                        str(ph.get("name", "")),
                        None if ph.get("parallel") is None else float(ph["parallel"]),
                    )
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(f"[[phases]] entry {i} is invalid ({exc})") from None
        meta = {k: v for k, v in data.items() if k not in ("model", "phases")}
        return cls(params=params, phases=phases or [PhaseSpec(0, 1.0)], name=name, meta=meta)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (parameters, phases, fit report)."""
        return {
            "name": self.name,
            "params": dataclasses.asdict(self.params),
            "phases": [dataclasses.asdict(p) for p in self.phases],
            "fit_report": self.fit_report_.to_dict() if self.fit_report_ else None,
        }


def list_presets() -> list[str]:
    """Names of the workload presets in ``configs/workloads``."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))

"""cloudopt.phases: workload phase discovery in resource traces (AI4DL: CRBM + k-means).

>>> from phases import read_traces, PhaseDetector
>>> traces = read_traces("traces.csv", exec_id="exec_id", features=["cpu_cores", "mem_gb"],
...                      time="time_s", min_length=4)                      # doctest: +SKIP
>>> model = PhaseDetector(random_state=0).fit(traces)                      # doctest: +SKIP
>>> phases = model.predict(traces)  # one array per execution, -1 = warm-up  # doctest: +SKIP

Modules: :mod:`phases.traces` (reading, scaling), :mod:`phases.crbm` (the CRBM),
:mod:`phases.features` (engineered inputs), :mod:`phases.smoothing` (phase smoothing),
:mod:`phases.detector` (:class:`PhaseDetector`), :mod:`phases.sequences` (statistics,
prototypes, transition graph), :mod:`phases.plots`, :mod:`phases.synthetic`.
"""

from __future__ import annotations

from pathlib import Path

from phases.detector import WARMUP, PhaseDetector
from phases.traces import FeatureScaler, TraceSet, read_traces

__all__ = [
    "PhaseDetector",
    "read_traces",
    "TraceSet",
    "FeatureScaler",
    "WARMUP",
    "load_default_detector",
    "DEFAULT_MODEL_DIR",
]

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "models" / "default"
"""The shipped model: fitted on ``dl-traces`` (features ``cpu_cores, mem_gb``; regenerate with
``python benchmarks/fit_default_phase_model.py``)."""


def load_default_detector(*, device: str | None = None) -> PhaseDetector:
    """The shipped :class:`PhaseDetector` (features ``cpu_cores`` in cores and ``mem_gb`` in GiB,
    ``delay=3``, 5 phases), fitted on the 60 measured PyTorch runs of ``dl-traces``."""
    return PhaseDetector.load(DEFAULT_MODEL_DIR, device=device)

__cloudopt_package__ = True  # checked, without importing, by optimizer.foundation.install_check

"""Phase labels for the autoscaling evaluation.

The phase model's inputs (raw or relative features), fitting or loading the model, and
attaching its labels to every execution. A policy reads the phase at the last sample before a cycle, so the labels must be causal;
:func:`attach_phases` checks that.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.errors import CloudoptError
from phases.policies import AutoscalingPolicy, Execution

PHASE_FEATURES = ("raw", "relative")


def relative_features(execution: Execution, window_s: float) -> np.ndarray:
    """Features divided by their trailing mean over the last ``window_s`` seconds (causal).

    Sample ``t`` is divided by the mean of the samples in ``(time_t - window_s, time_t]``, so a
    phase model fitted on these sees the *shape* of usage relative to the execution's own
    recent level, not the job's size. Non-positive levels leave the value unscaled.
    Shape ``(n_samples, n_features)``.
    """
    x, t = execution.features, execution.time
    csum = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
    first = np.searchsorted(t, t - window_s, side="right")
    end = np.arange(1, len(t) + 1)
    level = (csum[end] - csum[first]) / (end - first)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(level > 0, x / level, x)


def phase_inputs(executions: Sequence[Execution], kind: str, window_s: float) -> list[np.ndarray]:
    """What the phase model sees for each execution: raw or relative features."""
    if kind == "raw":
        return [e.features for e in executions]
    if kind == "relative":
        return [relative_features(e, window_s) for e in executions]
    raise CloudoptError(f"phase features must be one of {PHASE_FEATURES}, got {kind!r}")


def attach_phases(
    detector: Any, executions: Sequence[Execution], inputs: Sequence[np.ndarray] | None = None
) -> None:
    """Fill ``execution.phases`` with the detector's phase of every sample.

    ``inputs`` are the model's inputs (default: the raw features). The policies read the phase
    at the last sample before a cycle from a prediction over the whole execution, which is
    causal only if the detector labels sample ``t`` from samples ``≤ t``; a prefix of the
    longest execution is checked and a :class:`CloudoptError` raised otherwise.
    """
    inputs = list(inputs) if inputs is not None else [e.features for e in executions]
    sequences = detector.predict(inputs)
    for e, s in zip(executions, sequences, strict=True):
        s = np.asarray(s, dtype=np.int64)
        if len(s) != len(e.time):
            raise CloudoptError(f"phase model returned {len(s)} phases for {len(e.time)} samples")
        e.phases = s
    i = max(range(len(executions)), key=lambda k: len(executions[k].time))
    cut = len(executions[i].time) // 2
    if cut > 1:
        prefix = np.asarray(detector.predict([inputs[i][:cut]])[0])
        if not np.array_equal(prefix, executions[i].phases[:cut]):
            raise CloudoptError(
                "the phase model is not causal: phases of a prefix differ from those of the "
                "whole execution, so replaying them would use the future (e.g. a model fitted "
                "with preprocess='exec-norm')"
            )


def fit_phase_model(inputs: Sequence[np.ndarray], *, quiet: bool = True, **params: Any) -> Any:
    """A :class:`phases.PhaseDetector` fitted on the training executions' inputs."""
    from phases.detector import PhaseDetector

    return PhaseDetector(verbose=not quiet, **params).fit(list(inputs))


def detect_phases(
    train: Sequence[Execution],
    test: Sequence[Execution],
    *,
    model: str | Path | None = None,
    phase_features: str = "relative",
    window_s: float = 600.0,
    detector_params: dict[str, Any] | None = None,
    seed: int = 0,
    quiet: bool = True,
) -> str:
    """Fit (on ``train`` only) or load a phase model and label every sample; returns a note.

    ``phase_features="relative"`` feeds the model :func:`relative_features` with a trailing
    window of ``window_s`` (the cycle), ``"raw"`` the features as read. A loaded model must
    have been fitted on the same kind of inputs. The labels go to ``phases`` and to
    ``phase_sets[phase_features]``.
    """
    train_in = phase_inputs(train, phase_features, window_s)
    if model is not None:
        detector = load_phase_model(model, train[0].features.shape[1])
        note = f"loaded from {model} (it may have seen the test executions)"
    else:
        params = {"random_state": seed, **(detector_params or {})}
        detector = fit_phase_model(train_in, quiet=quiet, **params)
        note = f"fitted on the training split, {phase_features} features, {params}"
    attach_phases(detector, train, train_in)
    attach_phases(detector, test, phase_inputs(test, phase_features, window_s))
    for e in (*train, *test):
        e.phase_sets[phase_features] = e.phases
    return note + f"; {int(getattr(detector, 'n_phases_', 0))} phases"


def use_phases(policy: AutoscalingPolicy, executions: Sequence[Execution]) -> None:
    """Point every execution's ``phases`` at the labels the policy asks for."""
    kind = policy.phase_features
    if not policy.needs_phases or kind is None:
        return
    for e in executions:
        if kind not in e.phase_sets:
            raise CloudoptError(f"{policy.name} needs phases from a {kind!r}-feature model")
        e.phases = e.phase_sets[kind]


def load_phase_model(path: str | Path, n_features: int) -> Any:
    """Load a saved :class:`phases.PhaseDetector` and check its number of features."""
    from phases.detector import PhaseDetector

    detector = PhaseDetector.load(path)
    if int(getattr(detector, "n_features_in_", n_features)) != n_features:
        raise CloudoptError(
            f"{path}: phase model expects {detector.n_features_in_} features, "
            f"--features names {n_features}"
        )
    return detector


def phases_for_policies(
    built: Sequence[AutoscalingPolicy],
    train: Sequence[Execution],
    test: Sequence[Execution],
    *,
    phase_features: str,
    **kw: Any,
) -> list[str]:
    """Fit or load one phase model per kind of input the policies need; returns notes."""
    kinds = {p.phase_features or phase_features for p in built if p.needs_phases}
    model = kw.pop("model", None)
    return [
        detect_phases(
            train,
            test,
            model=model if kind == phase_features else None,
            phase_features=kind,
            **kw,
        )
        for kind in sorted(kinds)
    ]

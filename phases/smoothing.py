"""Temporal smoothing of phase sequences: a sticky hidden-Markov model over cluster scores.

Nearest-centroid labels flicker: a sample near the border of two phases changes phase from
one sample to the next, although a stage of a training job lasts seconds to minutes. The
smoother treats the phases as the states of a hidden Markov model with a "sticky" transition
matrix (stay with probability ``p``, move to each other phase with ``(1 - p) / (k - 1)``) and
an isotropic Gaussian emission around each centroid,

    log P(x_t | phase j) = -||x_t - c_j||^2 / (2 sigma^2) + const,

``sigma^2`` being the within-phase variance per dimension measured on the training codes.

- ``"viterbi"``: the most likely phase sequence of the whole execution (offline: a sample's
  phase depends on later samples).
- ``"forward"``: the phase of highest filtered probability ``P(phase_t | x_1..x_t)`` (causal:
  usable online and when replaying phases for autoscaling).

Both choose, per execution, only among the phases that are the nearest centroid of at least one
of its samples: smoothing removes flicker, it never labels an execution with a phase that none
of its samples is closest to. :func:`enforce_min_duration` is the blunter alternative, merging
runs shorter than a minimum duration into a neighbour.
"""

from __future__ import annotations

import numpy as np

from phases.sequences import run_lengths

__all__ = ["SMOOTHING", "enforce_min_duration", "smooth_phases", "sticky_log_transitions"]

SMOOTHING = ("none", "viterbi", "forward")


def sticky_log_transitions(n_states: int, stay: float) -> np.ndarray:
    """Log transition matrix that stays with probability ``stay``, shape ``(n_states,
    n_states)``."""
    if not 0 < stay < 1:
        raise ValueError(f"stay probability must be in (0, 1), got {stay!r}")
    if n_states == 1:
        return np.zeros((1, 1))
    out = np.full((n_states, n_states), np.log((1 - stay) / (n_states - 1)))
    np.fill_diagonal(out, np.log(stay))
    return out


def smooth_phases(
    sq_distances: np.ndarray, variance: float, *, method: str = "viterbi", stay: float = 0.99
) -> np.ndarray:
    """Smoothed phase of every sample of one execution.

    Parameters
    ----------
    sq_distances : ndarray of shape (n_samples, n_phases)
        Squared distance of each sample's code to each phase centroid, in time order.
    variance : float
        Emission variance ``sigma^2`` per code dimension (the distances are summed over the
        dimensions, so the log emission is ``-d / (2 * variance)``).
    method : {"viterbi", "forward", "none"}
        See the module docstring; ``"none"`` returns the nearest centroid.
    stay : float
        Probability of staying in a phase from one sample to the next.

    Returns
    -------
    ndarray of shape (n_samples,), int64
    """
    d = np.asarray(sq_distances, dtype=np.float64)
    if d.ndim != 2:
        raise ValueError(f"sq_distances must be 2-D (n_samples, n_phases), got shape {d.shape}")
    if method not in SMOOTHING:
        raise ValueError(f"smoothing method must be one of {SMOOTHING}, got {method!r}")
    nearest = d.argmin(1) if len(d) else np.zeros(0, np.int64)
    if method == "none" or len(d) < 2:
        return nearest.astype(np.int64)
    if not (np.isfinite(variance) and variance > 0):
        raise ValueError(f"emission variance must be a positive number, got {variance!r}")
    support = np.unique(nearest)
    log_e = -d[:, support] / (2.0 * variance)
    log_t = sticky_log_transitions(len(support), stay)
    path = _viterbi(log_e, log_t) if method == "viterbi" else _forward(log_e, log_t)
    return support[path].astype(np.int64)


def _viterbi(log_e: np.ndarray, log_t: np.ndarray) -> np.ndarray:
    n, k = log_e.shape
    back = np.zeros((n, k), dtype=np.int64)
    score = log_e[0] - np.log(k)
    for t in range(1, n):
        cand = score[:, None] + log_t  # cand[i, j]: be in i at t-1, move to j
        back[t] = cand.argmax(0)
        score = cand[back[t], np.arange(k)] + log_e[t]
    path = np.empty(n, dtype=np.int64)
    path[-1] = int(score.argmax())
    for t in range(n - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path


def _forward(log_e: np.ndarray, log_t: np.ndarray) -> np.ndarray:
    n, k = log_e.shape
    trans = np.exp(log_t)
    out = np.empty(n, dtype=np.int64)
    # Normalised in probability space each step; the emission is shifted by its maximum so
    # that far-away samples (large distances) do not underflow to all-zero.
    alpha = np.full(k, 1.0 / k)
    for t in range(n):
        e = np.exp(log_e[t] - log_e[t].max())
        alpha = (alpha @ trans if t else alpha) * e
        alpha /= alpha.sum()
        out[t] = int(alpha.argmax())
    return out


def enforce_min_duration(labels: np.ndarray, min_duration: int) -> np.ndarray:
    """Merge runs shorter than ``min_duration`` samples into a neighbouring run.

    The shortest run is merged first, into the longer of its neighbours (the earlier one on a
    tie), until every run is at least ``min_duration`` long or only one run is left. Offline:
    a sample's label can change once later samples are seen.

    Parameters
    ----------
    labels : ndarray of shape (n_samples,)
    min_duration : int
        Shortest run kept, in samples (1 keeps ``labels`` as they are).

    Returns
    -------
    ndarray of shape (n_samples,), same dtype
    """
    if not isinstance(min_duration, (int, np.integer)) or min_duration < 1:
        raise ValueError(f"min_duration must be a positive integer, got {min_duration!r}")
    labels = np.asarray(labels)
    if min_duration == 1 or len(labels) < 2:
        return labels.copy()
    values, runs = _runs(labels)
    while len(runs) > 1 and min(runs) < min_duration:
        i = int(np.argmin(runs))
        left = runs[i - 1] if i > 0 else -1
        right = runs[i + 1] if i + 1 < len(runs) else -1
        values[i] = values[i - 1] if left >= right else values[i + 1]
        values, runs = _merge_equal(values, runs)
    return np.repeat(np.asarray(values, dtype=labels.dtype), runs)


def _merge_equal(values: list, runs: list[int]) -> tuple[list, list[int]]:
    out_v, out_r = [values[0]], [runs[0]]
    for v, r in zip(values[1:], runs[1:], strict=True):
        if v == out_v[-1]:
            out_r[-1] += r
        else:
            out_v.append(v)
            out_r.append(r)
    return out_v, out_r


def _runs(labels: np.ndarray) -> tuple[list, list[int]]:
    runs = run_lengths(labels)
    return [r.phase for r in runs], [r.length for r in runs]


def smooth_executions(distances: list[np.ndarray], emission_var: float, *, method: str,
                      stay: float, min_duration: int) -> np.ndarray:
    """:func:`smooth_phases` then :func:`enforce_min_duration` on each execution's
    ``(n_windows_i, n_phases)`` squared distances, concatenated."""
    out = [enforce_min_duration(smooth_phases(d, emission_var, method=method, stay=stay),
                                min_duration) for d in distances]
    return np.concatenate(out) if out else np.zeros(0, np.int64)

"""``phase-proactive``: phase rules plus the phases expected within the coming cycle.

As ``phase-rules``, but allocates the upper envelope over the current phase and every phase the
transition graph reaches within the coming cycle with probability ≥ ``threshold``; the
transition and visit probabilities it reads are computed here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from phases.policies.execution import Execution
from phases.policies.phase_rules import PhaseRulesPolicy


def transition_matrix(sequences: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample phase transition probabilities from the transition graph.

    Built with :class:`phases.sequences.TransitionGraph` (warm-up included): ``P[i, j]`` is
    the share of samples in phase ``labels[i]`` followed by ``labels[j]``, self-transitions
    included so dwell times are kept. A phase never left is made absorbing.

    Returns
    -------
    labels : ndarray of shape (k,)
    P : ndarray of shape (k, k)
    """
    from phases.sequences import TransitionGraph

    graph = TransitionGraph.from_sequences(sequences, include_warmup=True)
    matrix = graph.matrix.copy()
    never_left = matrix.sum(axis=1) == 0
    matrix[never_left, never_left] = 1.0
    return np.asarray(graph.phases, dtype=np.int64), matrix


def visit_probabilities(transitions: np.ndarray, n_steps: int) -> np.ndarray:
    """Probability of being in phase ``j`` at least once within ``n_steps`` steps from ``i``.

    For each target ``j`` the chain is made absorbing in ``j``; the mass absorbed after
    ``n_steps`` steps is the visit probability. ``V[i, i] = 1``. Shape ``(k, k)``.
    """
    k = len(transitions)
    visits = np.eye(k)
    for j in range(k):
        absorbing = transitions.copy()
        absorbing[j] = 0.0
        absorbing[j, j] = 1.0
        reach = np.linalg.matrix_power(absorbing, max(int(n_steps), 1))[:, j]
        visits[:, j] = np.maximum(visits[:, j], reach)
    return visits


class PhaseProactivePolicy(PhaseRulesPolicy):
    """Phase rules plus the phases the transition graph expects within the coming cycle.

    The allocation is the upper envelope (per resource maximum) of the statistics of the
    current phase and of every phase ``j`` with ``P(visit j within one cycle | current) >=
    threshold``, computed from the per-sample transition matrix of the training sequences by
    :func:`visit_probabilities` with the training executions' median number of samples per
    cycle as the number of steps. A burst that usually follows the current phase is thus
    provisioned before it arrives.

    Parameters
    ----------
    threshold : float, default=0.5
        Minimum probability of visiting a phase in the coming cycle for it to count. Chosen
        among 0.1-0.9 on a validation split of the dl-traces *training* executions (0.1 and
        0.25 let the memory-growth phases into nearly every envelope).
    **kwargs
        ``stats``, ``level``, ``conditioning``, ``n_std``, ``cold_start`` as
        :class:`PhaseRulesPolicy`.

    Attributes
    ----------
    transitions_ : ndarray of shape (n_phases, n_phases)
    visits_ : ndarray of shape (n_phases, n_phases)
    steps_per_cycle_ : int
    """

    def __init__(self, *, threshold: float = 0.5, **kwargs) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold
        self.name = self.name.replace("phase-rules", "phase-proactive")

    def fit(self, train: Sequence[Execution]) -> PhaseProactivePolicy:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        super().fit(train)
        self.labels_, self.transitions_ = transition_matrix([e.phases for e in train])
        full = [np.bincount(e.cycle)[:-1] for e in train if e.n_cycles > 1]
        self.steps_per_cycle_ = int(np.median(np.concatenate(full))) if full else 1
        self.visits_ = visit_probabilities(self.transitions_, self.steps_per_cycle_)
        return self

    def _phases_ahead(self, phase: int) -> list[int]:
        i = np.flatnonzero(self.labels_ == phase)
        if len(i) == 0:
            return [phase]
        likely = self.labels_[self.visits_[i[0]] >= self.threshold]
        return sorted({phase, *map(int, likely)})

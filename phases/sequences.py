"""Phase sequences: run lengths, per-phase statistics, prototypes and the transition graph.

AI4DL (Berral et al., HotCloud'20, section 4) reads an execution as the sequence of its phases:

- **run lengths** (:func:`run_lengths`): ``[3, 3, 2, 2, 2]`` -> ``[(3, 0, 2), (2, 2, 3)]``
  (phase, start, length);
- **per-phase statistics** of the original, unscaled features (:func:`phase_stats`): mean, std,
  median, quartiles, max and count per phase and feature, the numbers autoscaling rules use;
- the **prototype tree** (:class:`PrototypeTree`): each sequence is *packed* (repeated samples
  collapsed, then repeated alternations such as ``5 1 5 1 5 1`` collapsed to ``5 1``); identical
  packed sequences are counted and the most common ones are the prototypes, with the share of
  executions the top ``k`` cover;
- the **transition graph** (:class:`TransitionGraph`): first-order transition probabilities
  :math:`P(\\phi_{t+1} = j \\mid \\phi_t = i)` estimated from counts of consecutive samples
  (self-loops included, so the diagonal is the probability of staying), exportable as a table
  and as Graphviz DOT text, with :meth:`TransitionGraph.predict_next_phase`.

Warm-up samples (phase -1, no full CRBM history) are left out of statistics, prototypes and
transitions unless asked for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

__all__ = [
    "PhaseRun",
    "run_lengths",
    "pack_sequence",
    "phase_stats",
    "PrototypeTree",
    "TransitionGraph",
]

WARMUP = -1


class PhaseRun(NamedTuple):
    """A maximal stretch of consecutive samples in one phase."""

    phase: int
    start: int
    length: int


def run_lengths(sequence: Sequence[int] | np.ndarray) -> list[PhaseRun]:
    """Run-length encoding of one phase sequence.

    Parameters
    ----------
    sequence : array-like of shape (n_samples,)

    Returns
    -------
    list of PhaseRun
    """
    seq = np.asarray(sequence, dtype=np.int64)
    if seq.size == 0:
        return []
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    lengths = np.diff(np.r_[starts, seq.size])
    return [PhaseRun(int(seq[s]), int(s), int(n)) for s, n in zip(starts, lengths, strict=True)]


def pack_sequence(
    sequence: Sequence[int] | np.ndarray, *, max_period: int = 4, include_warmup: bool = False
) -> tuple[int, ...]:
    """Pack a phase sequence: collapse repeats, then repeated alternations.

    ``[3, 3, 2, 5, 1, 5, 1, 5, 1, 4]`` -> ``(3, 2, 5, 1, 4)``. A block of up to ``max_period``
    phases immediately repeated is kept once, until no such repetition is left.
    """
    seq = [r.phase for r in run_lengths(sequence) if include_warmup or r.phase != WARMUP]
    changed = True
    while changed:
        changed = False
        for period in range(1, max_period + 1):
            i = 0
            while i + 2 * period <= len(seq):
                if seq[i : i + period] == seq[i + period : i + 2 * period]:
                    del seq[i + period : i + 2 * period]
                    changed = True
                else:
                    i += 1
    return tuple(seq)


def _concat(
    arrays: Sequence[np.ndarray], sequences: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    if len(arrays) != len(sequences):
        raise ValueError(f"{len(arrays)} executions but {len(sequences)} phase sequences")
    for i, (a, s) in enumerate(zip(arrays, sequences, strict=True)):
        if len(a) != len(s):
            raise ValueError(f"execution {i}: {len(a)} samples but {len(s)} phase labels")
    x = np.concatenate([np.asarray(a, dtype=np.float64) for a in arrays])
    return x, np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])


def phase_stats(
    arrays: Sequence[np.ndarray],
    sequences: Sequence[np.ndarray],
    features: Sequence[str] | None = None,
    *,
    include_warmup: bool = False,
) -> pd.DataFrame:
    """Statistics of the original features per phase.

    Parameters
    ----------
    arrays : sequence of ndarray of shape (n_samples_i, n_features)
        Unscaled executions (``TraceSet.arrays``).
    sequences : sequence of ndarray of shape (n_samples_i,)
        Phase of each sample (``PhaseDetector.predict``).
    features : sequence of str, optional
        Feature names (``f0, f1...`` by default).

    Returns
    -------
    DataFrame
        One row per (phase, feature) with columns ``phase, feature, count, mean, std, min, q1,
        median, q3, max`` (std with ``ddof=0``), sorted by phase then feature order.
    """
    x, labels = _concat(arrays, sequences)
    features = list(features) if features is not None else [f"f{i}" for i in range(x.shape[1])]
    if len(features) != x.shape[1]:
        raise ValueError(f"{len(features)} feature names for {x.shape[1]} features")
    rows = []
    for phase in np.unique(labels):
        if phase == WARMUP and not include_warmup:
            continue
        values = x[labels == phase]
        q1, med, q3 = np.percentile(values, [25, 50, 75], axis=0)
        for j, name in enumerate(features):
            col = values[:, j]
            rows.append(
                {
                    "phase": int(phase),
                    "feature": name,
                    "count": int(len(col)),
                    "mean": float(col.mean()),
                    "std": float(col.std()),
                    "min": float(col.min()),
                    "q1": float(q1[j]),
                    "median": float(med[j]),
                    "q3": float(q3[j]),
                    "max": float(col.max()),
                }
            )
    columns = ["phase", "feature", "count", "mean", "std", "min", "q1", "median", "q3", "max"]
    return pd.DataFrame(rows, columns=columns)


@dataclass
class PrototypeTree:
    """Packed phase sequences counted, and their prefix tree.

    Attributes
    ----------
    counts : Counter of tuple[int, ...]
        Executions per packed sequence.
    n_executions : int
    """

    counts: Counter
    n_executions: int

    @classmethod
    def from_sequences(
        cls, sequences: Iterable[Sequence[int] | np.ndarray], *, max_period: int = 4
    ) -> PrototypeTree:
        packed = [pack_sequence(s, max_period=max_period) for s in sequences]
        return cls(Counter(packed), len(packed))

    def prototypes(self, top_k: int | None = None) -> list[tuple[tuple[int, ...], int, float]]:
        """``(packed sequence, executions, share)`` most common first (ties: shorter, then
        lexicographic)."""
        items = sorted(self.counts.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))
        if top_k is not None:
            items = items[:top_k]
        n = max(self.n_executions, 1)
        return [(seq, count, count / n) for seq, count in items]

    def coverage(self, top_k: int) -> float:
        """Share of executions whose packed sequence is one of the ``top_k`` prototypes."""
        return float(sum(share for _, _, share in self.prototypes(top_k)))

    def to_frame(self, top_k: int | None = None) -> pd.DataFrame:
        """Prototypes as a table: ``rank, sequence, executions, share, cumulative_share``."""
        rows, cum = [], 0.0
        for rank, (seq, count, share) in enumerate(self.prototypes(top_k), start=1):
            cum += share
            rows.append(
                {
                    "rank": rank,
                    "sequence": " > ".join(map(str, seq)) or "(warm-up only)",
                    "executions": count,
                    "share": share,
                    "cumulative_share": cum,
                }
            )
        return pd.DataFrame(
            rows, columns=["rank", "sequence", "executions", "share", "cumulative_share"]
        )

    def tree(self) -> dict:
        """Prefix tree: ``{phase: {"count": n, "children": {...}}}``."""
        root: dict = {}
        for seq, count in self.counts.items():
            level = root
            for phase in seq:
                node = level.setdefault(int(phase), {"count": 0, "children": {}})
                node["count"] += count
                level = node["children"]
        return root

    def to_text(self) -> str:
        """The prefix tree as indented text, children by decreasing count."""
        lines: list[str] = []

        def walk(level: dict, depth: int) -> None:
            for phase, node in sorted(level.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
                lines.append(f"{'  ' * depth}{phase} ({node['count']})")
                walk(node["children"], depth + 1)

        walk(self.tree(), 0)
        return "\n".join(lines)


@dataclass
class TransitionGraph:
    """First-order phase transition counts and probabilities.

    Attributes
    ----------
    phases : list of int
        Node ids, the row/column order of the matrices.
    counts : ndarray of shape (n_phases, n_phases), int64
        ``counts[i, j]``: consecutive samples going from ``phases[i]`` to ``phases[j]``.
    """

    phases: list[int]
    counts: np.ndarray

    @classmethod
    def from_sequences(
        cls,
        sequences: Iterable[Sequence[int] | np.ndarray],
        *,
        phases: Sequence[int] | None = None,
        include_warmup: bool = False,
    ) -> TransitionGraph:
        """Count transitions between consecutive samples of each sequence.

        Parameters
        ----------
        sequences : iterable of array-like of shape (n_samples_i,)
        phases : sequence of int, optional
            Nodes to include (e.g. ``range(model.n_phases_)`` so unseen phases get a row);
            by default the phases that occur.
        include_warmup : bool, default=False
            Keep phase -1 as a node (its outgoing edges then give the first phase after warm-up).
        """
        seqs = [np.asarray(s, dtype=np.int64) for s in sequences]
        if not include_warmup:
            seqs = [s[s != WARMUP] for s in seqs]
        seen = sorted({int(p) for s in seqs for p in np.unique(s)})
        nodes = sorted(set(phases)) if phases is not None else seen
        if phases is not None and include_warmup:
            nodes = sorted(set(nodes) | {WARMUP})
        if phases is not None and not set(seen) <= set(nodes):
            raise ValueError(
                f"sequences hold phases {sorted(set(seen) - set(nodes))} not in phases"
            )
        index = {p: i for i, p in enumerate(nodes)}
        counts = np.zeros((len(nodes), len(nodes)), dtype=np.int64)
        lookup = np.vectorize(index.__getitem__, otypes=[np.int64])
        for s in seqs:
            if len(s) > 1:
                ids = lookup(s)
                np.add.at(counts, (ids[:-1], ids[1:]), 1)
        return cls(list(nodes), counts)

    @property
    def matrix(self) -> np.ndarray:
        """Row-stochastic transition probabilities, shape ``(n_phases, n_phases)``; a phase never
        left (no outgoing counts) has a zero row."""
        totals = self.counts.sum(1, keepdims=True)
        return np.divide(self.counts, totals, out=np.zeros(self.counts.shape), where=totals > 0)

    def to_frame(self) -> pd.DataFrame:
        """The probability matrix as a table indexed ``from`` x ``to`` phase."""
        return pd.DataFrame(
            self.matrix,
            index=pd.Index(self.phases, name="from"),
            columns=pd.Index(self.phases, name="to"),
        )

    def edges(
        self, *, min_prob: float = 0.0, self_loops: bool = True
    ) -> list[tuple[int, int, float]]:
        """``(from, to, probability)`` for every edge with probability ``> min_prob``."""
        out = []
        m = self.matrix
        for i, a in enumerate(self.phases):
            for j, b in enumerate(self.phases):
                if m[i, j] > min_prob and (self_loops or i != j):
                    out.append((a, b, float(m[i, j])))
        return out

    def to_dot(
        self, *, min_prob: float = 0.01, self_loops: bool = True, name: str = "phases"
    ) -> str:
        """Graphviz DOT text: one node per phase, edges labelled with their probability."""
        lines = [f"digraph {name} {{", "  rankdir=LR;", "  node [shape=circle];"]
        for p in self.phases:
            label = "warm-up" if p == WARMUP else f"phase {p}"
            lines.append(f'  p{_dot_id(p)} [label="{label}"];')
        for a, b, prob in self.edges(min_prob=min_prob, self_loops=self_loops):
            lines.append(
                f'  p{_dot_id(a)} -> p{_dot_id(b)} [label="{prob:.2f}", '
                f"penwidth={0.5 + 3 * prob:.2f}];"
            )
        lines.append("}")
        return "\n".join(lines) + "\n"

    def next_phase_distribution(self, history: Sequence[int] | np.ndarray) -> dict[int, float]:
        """``P(next phase | last phase of history)`` as ``{phase: probability}``."""
        last = self._last_phase(history)
        row = self.matrix[self.phases.index(last)]
        return {p: float(q) for p, q in zip(self.phases, row, strict=True) if q > 0}

    def predict_next_phase(self, history: Sequence[int] | np.ndarray) -> tuple[int, float]:
        """Most likely phase of the next sample given the phases so far (first-order: only the
        last non-warm-up phase matters).

        Returns
        -------
        (phase, probability)
            Ties go to the lower phase id. A phase with no observed outgoing transition
            predicts itself with probability 1.0 (nothing seen leaves it).

        Raises
        ------
        ValueError
            ``history`` is empty (or warm-up only) or ends in a phase the graph has never seen.
        """
        last = self._last_phase(history)
        row = self.matrix[self.phases.index(last)]
        if row.sum() == 0:
            return last, 1.0
        j = int(np.argmax(row))
        return self.phases[j], float(row[j])

    def _last_phase(self, history: Sequence[int] | np.ndarray) -> int:
        h = [
            int(p)
            for p in np.asarray(history, dtype=np.int64).ravel()
            if int(p) != WARMUP or WARMUP in self.phases
        ]
        if not h:
            raise ValueError("history has no phase (empty or warm-up only)")
        if h[-1] not in self.phases:
            raise ValueError(f"phase {h[-1]} is not in the transition graph ({self.phases})")
        return h[-1]


def _dot_id(p: int) -> str:
    return f"m{-p}" if p < 0 else str(p)

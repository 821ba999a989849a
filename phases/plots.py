"""Figures of detected phases (matplotlib, Agg backend: files only, no display).

- :func:`plot_trace`: one execution's CPU and memory over time on a background coloured by
  phase (AI4DL's ``PrintTrace``);
- :func:`plot_phase_stats`: box plots of each feature per phase, the "variance analysis" of
  AI4DL (Berral et al., HotCloud'20, Figure 3);
- :func:`plot_transition_graph`: the phase transition graph drawn with matplotlib (no Graphviz
  needed; :meth:`~phases.sequences.TransitionGraph.to_dot` gives DOT text for Graphviz).

Each function returns the figure and, when ``path`` is given, saves it as PNG and closes it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from phases.sequences import WARMUP, TransitionGraph, run_lengths  # noqa: E402

__all__ = ["phase_color", "plot_trace", "plot_phase_stats", "plot_transition_graph"]

_PALETTE = plt.get_cmap("tab10").colors
_WARMUP_COLOR = (0.85, 0.85, 0.85)


def phase_color(phase: int) -> tuple[float, float, float]:
    """Colour of a phase (grey for warm-up), consistent across all figures."""
    return _WARMUP_COLOR if phase == WARMUP else tuple(_PALETTE[int(phase) % len(_PALETTE)])


def _finish(fig: Figure, path: str | os.PathLike | None) -> Figure:
    if path is not None:
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
    return fig


def plot_trace(
    values: np.ndarray,
    phases: Sequence[int] | np.ndarray,
    *,
    times: np.ndarray | None = None,
    features: Sequence[str] | None = None,
    title: str = "",
    time_label: str | None = None,
    path: str | os.PathLike | None = None,
) -> Figure:
    """One execution with a phase-coloured background, one panel per feature.

    Parameters
    ----------
    values : ndarray of shape (n_samples, n_plotted)
        Unscaled features to draw (e.g. CPU and memory columns).
    phases : array-like of shape (n_samples,)
        Phase per sample (``PhaseDetector.predict`` output for this execution).
    times : ndarray of shape (n_samples,), optional
        x axis (sample index by default).
    features : sequence of str, optional
        Panel labels.
    """
    values = np.asarray(values, dtype=np.float64).reshape(len(phases), -1)
    t = np.arange(len(values), dtype=np.float64) if times is None else np.asarray(times, float)
    names = list(features) if features is not None else [f"f{i}" for i in range(values.shape[1])]
    fig, axes = plt.subplots(
        values.shape[1], 1, figsize=(10, 1.8 + 1.6 * values.shape[1]), sharex=True, squeeze=False
    )
    # a sample's phase colours the span up to the next sample
    edges = np.r_[t, t[-1] + (t[-1] - t[-2] if len(t) > 1 else 1.0)]
    runs = run_lengths(phases)
    for j, ax in enumerate(axes[:, 0]):
        for run in runs:
            ax.axvspan(
                edges[run.start],
                edges[run.start + run.length],
                color=phase_color(run.phase),
                alpha=0.35,
                lw=0,
            )
        ax.plot(t, values[:, j], color="black", lw=1.0)
        ax.set_ylabel(names[j])
    axes[-1, 0].set_xlabel(time_label or ("time" if times is not None else "sample"))
    present = sorted({r.phase for r in runs})
    handles = [
        Patch(color=phase_color(p), alpha=0.5, label="warm-up" if p == WARMUP else f"phase {p}")
        for p in present
    ]
    axes[0, 0].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    axes[0, 0].set_title(title)
    fig.tight_layout()
    return _finish(fig, path)


def plot_phase_stats(
    arrays: Sequence[np.ndarray],
    sequences: Sequence[np.ndarray],
    features: Sequence[str],
    *,
    columns: Sequence[int] | None = None,
    title: str = "",
    path: str | os.PathLike | None = None,
) -> Figure:
    """Box plots of each feature per phase (warm-up excluded).

    Parameters
    ----------
    arrays : sequence of ndarray of shape (n_samples_i, n_features)
        Unscaled executions.
    sequences : sequence of ndarray of shape (n_samples_i,)
        Phases per sample.
    features : sequence of str
        Names of the array columns.
    columns : sequence of int, optional
        Columns to plot (all by default; AI4DL plots CPU and memory).
    """
    x = np.concatenate([np.asarray(a, dtype=np.float64) for a in arrays])
    labels = np.concatenate([np.asarray(s) for s in sequences])
    cols = list(columns) if columns is not None else list(range(x.shape[1]))
    present = [p for p in np.unique(labels) if p != WARMUP]
    fig, axes = plt.subplots(1, len(cols), figsize=(3.2 + 2.4 * len(cols), 3.6), squeeze=False)
    for ax, j in zip(axes[0], cols, strict=True):
        data = [x[labels == p, j] for p in present]
        box = ax.boxplot(
            data,
            patch_artist=True,
            showfliers=True,
            flierprops={"markersize": 2},
            medianprops={"color": "black"},
        )
        ax.set_xticks(range(1, len(present) + 1), [str(p) for p in present])
        for patch, p in zip(box["boxes"], present, strict=True):
            patch.set_facecolor(phase_color(p))
            patch.set_alpha(0.6)
        ax.set_xlabel("phase")
        ax.set_title(features[j])
    fig.suptitle(title or "per-phase distribution")
    fig.tight_layout()
    return _finish(fig, path)


def plot_transition_graph(
    graph: TransitionGraph,
    *,
    min_prob: float = 0.02,
    title: str = "",
    path: str | os.PathLike | None = None,
) -> Figure:
    """Phases on a circle, arrows for transitions with probability ``> min_prob``; each node is
    annotated with its self-loop (staying) probability."""
    n = len(graph.phases)
    angle = np.linspace(np.pi / 2, np.pi / 2 - 2 * np.pi, n, endpoint=False)
    pos = {p: (np.cos(a), np.sin(a)) for p, a in zip(graph.phases, angle, strict=True)}
    matrix = graph.matrix
    fig, ax = plt.subplots(figsize=(6, 6))
    for a, b, prob in graph.edges(min_prob=min_prob, self_loops=False):
        (x0, y0), (x1, y1) = pos[a], pos[b]
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops={
                "arrowstyle": "-|>",
                "lw": 0.6 + 4 * prob,
                "color": "0.3",
                "shrinkA": 22,
                "shrinkB": 22,
                "connectionstyle": "arc3,rad=0.15",
                "mutation_scale": 14,
            },
        )
        # label near the arrow's middle, pushed sideways so A->B and B->A do not overlap
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        nx, ny = -(y1 - y0) * 0.12, (x1 - x0) * 0.12
        ax.text(mx + nx, my + ny, f"{prob:.2f}", fontsize=8, ha="center", va="center")
    for i, p in enumerate(graph.phases):
        x, y = pos[p]
        ax.scatter([x], [y], s=1600, color=phase_color(p), edgecolors="black", zorder=3)
        label = "warm-up" if p == WARMUP else f"{p}"
        ax.text(x, y, label, ha="center", va="center", fontsize=11, zorder=4)
        ax.text(
            x * 1.42,
            y * 1.42,
            f"stay {matrix[i, i]:.2f}",
            ha="center",
            va="center",
            fontsize=8,
            color="0.25",
        )
    ax.set_xlim(-1.75, 1.75)
    ax.set_ylim(-1.75, 1.75)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or "phase transitions (per sample)")
    return _finish(fig, path)

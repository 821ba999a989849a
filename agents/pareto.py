"""Pareto front and hypervolume of (cost, time, resource) outcomes, all minimised.

A point ``p`` dominates ``q`` when ``p <= q`` in every objective and ``p < q`` in at least one;
the Pareto front is the set of points no other point dominates. The hypervolume indicator
(Zitzler & Thiele, 1999) is the Lebesgue measure of the region dominated by the front and bounded
by a reference point ``r`` that every objective must beat:

    HV(P, r) = volume( union_{p in P} [p_1, r_1] x ... x [p_k, r_k] )

computed exactly by slicing along the last objective ("hypervolume by slicing objectives",
While et al., 2006): sort by the last coordinate and add, for each slab between consecutive
values, the (k-1)-dimensional hypervolume of the points below it times the slab's thickness.
Exact for any ``k``; cost grows quickly with ``k`` but 2-3 objectives and tens of points take
microseconds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from optimizer.foundation.atomic_files import atomic_write_csv

OBJECTIVE_COLUMNS = ("cost", "time", "resource")


def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Which points are non-dominated (minimisation).

    Parameters
    ----------
    points : array, shape ``(n_points, n_objectives)``

    Returns
    -------
    bool array, shape ``(n_points,)``. Identical points do not dominate each other, so duplicates
    of a front point are all kept.
    """
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2:
        raise ValueError(f"points must be 2-D (n_points, n_objectives), got shape {pts.shape}")
    le = (pts[:, None, :] <= pts[None, :, :]).all(axis=2)  # le[i, j]: i <= j everywhere
    lt = (pts[:, None, :] < pts[None, :, :]).any(axis=2)
    dominated = (le & lt).any(axis=0)  # some i dominates j
    return ~dominated


def _hv_sorted(points: np.ndarray, ref: np.ndarray) -> float:
    if points.shape[1] == 1:
        return float(ref[0] - points[:, 0].min())
    order = np.argsort(points[:, -1], kind="stable")
    pts = points[order]
    volume = 0.0
    for i in range(len(pts)):
        upper = pts[i + 1, -1] if i + 1 < len(pts) else ref[-1]
        depth = upper - pts[i, -1]
        if depth > 0:
            volume += _hv_sorted(pts[: i + 1, :-1], ref[:-1]) * depth
    return volume


def hypervolume(points: np.ndarray, reference: Sequence[float]) -> float:
    """Exact hypervolume dominated by ``points`` (minimisation) up to ``reference``.

    Points that do not beat the reference in every objective contribute nothing.

    Parameters
    ----------
    points : array, shape ``(n_points, n_objectives)``
    reference : sequence of ``n_objectives`` floats
    """
    pts = np.asarray(points, dtype=float).reshape(-1, len(reference))
    ref = np.asarray(reference, dtype=float)
    pts = pts[(pts < ref).all(axis=1)]
    if len(pts) == 0:
        return 0.0
    pts = pts[pareto_mask(pts)]
    return _hv_sorted(pts, ref)


def pareto_front(
    outcomes: pd.DataFrame, columns: Sequence[str] = OBJECTIVE_COLUMNS
) -> pd.DataFrame:
    """``outcomes`` with an ``on_front`` column marking the non-dominated rows over ``columns``."""
    missing = [c for c in columns if c not in outcomes.columns]
    if missing:
        raise ValueError(f"outcomes lack objective column(s) {missing}; have {list(outcomes)}")
    out = outcomes.copy()
    out["on_front"] = pareto_mask(out[list(columns)].to_numpy(dtype=float))
    return out


def save_front_csv(
    path: str | os.PathLike,
    outcomes: pd.DataFrame,
    reference: Sequence[float],
    columns: Sequence[str] = OBJECTIVE_COLUMNS,
) -> float:
    """Write outcomes with ``on_front`` and the front's hypervolume (a constant column) to CSV.

    Returns the hypervolume.
    """
    front = pareto_front(outcomes, columns)
    hv = hypervolume(front[list(columns)].to_numpy(dtype=float), reference)
    front["hypervolume"] = hv
    for col, r in zip(columns, reference, strict=True):
        front[f"reference_{col}"] = float(r)
    atomic_write_csv(path, front)
    return hv


def plot_front(
    path: str | os.PathLike,
    outcomes: pd.DataFrame,
    x: str = "cost",
    y: str = "time",
    label: str = "label",
    columns: Sequence[str] = OBJECTIVE_COLUMNS,
    title: str = "Pareto front",
) -> None:
    """Scatter of outcomes on two objectives, front points joined; saved as an image (Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = pareto_front(outcomes, columns)
    fig, ax = plt.subplots(figsize=(5, 4))
    on = front[front["on_front"]].sort_values(x)
    off = front[~front["on_front"]]
    ax.scatter(off[x], off[y], c="0.6", label="dominated")
    ax.plot(on[x], on[y], "o-", c="C0", label=f"Pareto front over {len(columns)} objectives")
    if label in front.columns:
        for _, row in front.iterrows():
            ax.annotate(
                str(row[label]),
                (row[x], row[y]),
                fontsize=8,
                xytext=(3, 3),
                textcoords="offset points",
            )
    ax.set_xlabel(f"{x} (lower is better)")
    ax.set_ylabel(f"{y} (lower is better)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = f"{os.fspath(path)}.tmp.png"
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)

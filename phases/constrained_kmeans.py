"""k-means with some centroids held fixed, used to add phases to a fitted model.

:meth:`PhaseDetector.expand <phases.detector.PhaseDetector.expand>` keeps the existing
phases' centroids (and so their ids and meaning) and places only the new ones.
"""

from __future__ import annotations

import numpy as np


def constrained_kmeans(
    x: np.ndarray, fixed: np.ndarray, n_new: int, rng: np.random.Generator, max_iter: int = 100
) -> tuple[np.ndarray, float]:
    """Lloyd's k-means where the centroids ``fixed`` never move; returns the new centroids."""
    d2 = ((x[:, None, :] - fixed[None]) ** 2).sum(-1).min(1)
    new = []
    for _ in range(n_new):  # k-means++ seeding against everything chosen so far
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(len(x), 1 / len(x))
        c = x[rng.choice(len(x), p=p)]
        new.append(c)
        d2 = np.minimum(d2, ((x - c) ** 2).sum(1))
    new = np.array(new)
    labels = None
    for _ in range(max_iter):
        centers = np.vstack([fixed, new])
        dist = ((x[:, None, :] - centers[None]) ** 2).sum(-1)
        next_labels = dist.argmin(1)
        if labels is not None and np.array_equal(labels, next_labels):
            break
        labels = next_labels
        for j in range(n_new):
            members = x[labels == len(fixed) + j]
            if len(members):
                new[j] = members.mean(0)
    centers = np.vstack([fixed, new])
    inertia = float(((x[:, None, :] - centers[None]) ** 2).sum(-1).min(1).sum())
    return new, inertia


def best_of_restarts(x: np.ndarray, fixed: np.ndarray, n_new: int, rng: np.random.Generator,
                     restarts: int = 10) -> np.ndarray:
    """The new centroids of the :func:`constrained_kmeans` restart with the least inertia."""
    best, best_inertia = None, np.inf
    for _ in range(restarts):
        new, inertia = constrained_kmeans(x, fixed, n_new, rng)
        if inertia < best_inertia:
            best, best_inertia = new, inertia
    return best

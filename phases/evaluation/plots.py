"""Plots of an autoscaling evaluation: allocation against use over time, and per-policy bars.

matplotlib is imported inside each function, so reading metrics never needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.errors import CloudoptError
from phases.evaluation.metrics import EvaluationResult


def plot_allocations(result: EvaluationResult, exec_id: str, path: str | Path) -> None:
    """Use and every policy's allocation over time for one test execution, one panel per resource."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    index = {e.exec_id: i for i, e in enumerate(result.test)}
    if exec_id not in index:
        raise CloudoptError(f"execution {exec_id!r} is not in the test split: {sorted(index)}")
    e = result.test[index[exec_id]]
    t = e.time - e.time[0]
    fig, axes = plt.subplots(
        len(result.resources),
        1,
        figsize=(10, 3.2 * len(result.resources)),
        sharex=True,
        squeeze=False,
    )
    for r, ax in enumerate(axes[:, 0]):
        ax.plot(t, e.usage[:, r], color="black", lw=2, label="use")
        for name, plans in result.plans.items():
            ax.step(t, plans[index[exec_id]][e.cycle, r], where="post", lw=1.2, label=name)
        ax.set_ylabel(result.resources[r])
        ax.grid(alpha=0.3)
    axes[0, 0].set_title(f"allocation vs use, execution {exec_id}")
    axes[0, 0].legend(fontsize=7, ncol=3, loc="upper left")
    axes[-1, 0].set_xlabel("seconds since start")
    fig.tight_layout()
    _save(fig, path)


def plot_policy_bars(result: EvaluationResult, path: str | Path) -> None:
    """Bar charts of over-allocation % and under-provisioned % per policy and resource."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result.metrics)
    x = np.arange(len(names))
    width = 0.8 / len(result.resources)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, key, title in zip(
        axes,
        ("over_allocation_pct", "under_provisioned_pct"),
        ("over-allocation (% of use)", "samples under-provisioned (%)"),
        strict=True,
    ):
        for i, r in enumerate(result.resources):
            ax.bar(x + i * width, [result.metrics[n][r][key] for n in names], width, label=r)
        ax.set_xticks(x + width * (len(result.resources) - 1) / 2, names, rotation=40, ha="right")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[1].axhline(100 * 0.05, color="red", lw=0.8, ls="--")
    axes[0].legend()
    fig.tight_layout()
    _save(fig, path)


def _save(fig: Any, path: str | Path) -> None:
    import io

    import matplotlib.pyplot as plt

    from optimizer.foundation.atomic_files import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())

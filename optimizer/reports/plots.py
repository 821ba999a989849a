"""The run report's figures: baseline against optimized, the Pareto sweep, the plan's
allocations, the agents' learning curves and the baseline trace's phases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd

from optimizer.trials.records import TrialSummary, job_cost, job_time

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_comparison(path: Path, base: TrialSummary, opt: TrialSummary,
                     predicted: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    specs = [("job time (s)", job_time(base), job_time(opt), predicted.get("time_s")),
             ("job cost ($)", job_cost(base), job_cost(opt), predicted.get("cost")),
             ("throughput (samples/s)", base.throughput, opt.throughput,
              predicted.get("throughput"))]
    for ax, (label, b, o, p) in zip(axes, specs, strict=True):
        ax.bar(["baseline", "optimized"], [b or 0, o or 0], color=["0.6", "C0"])
        if p:
            ax.plot([1], [p], "r_", markersize=30, mew=2)
        ax.set_title(label, fontsize=10)
    fig.suptitle("Baseline vs optimized (bars: real runs; red line: the plan's prediction)",
                 fontsize=11)
    save_figure(fig, path)


def plot_pareto(path: Path, sweep: pd.DataFrame, trials: list[TrialSummary],
                 chosen: dict[str, Any], opt: TrialSummary) -> None:
    fig, ax = plt.subplots(figsize=(6, 4.2))
    if not sweep.empty:
        front = sweep[sweep["pareto"]].sort_values("cost")
        ax.plot(front["cost"], front["time_s"], "o-", c="C0", zorder=6, ms=5,
                label=f"Pareto front ({len(front)} point(s): DP optimum per cost/time weight, "
                "predicted)")
    pts = [(job_cost(t), job_time(t)) for t in trials
           if t.ok and job_time(t) and job_cost(t) is not None]
    if pts:
        ax.scatter(*zip(*pts, strict=True), c="0.5", marker="s", label="baseline trials")
    if chosen.get("cost") and chosen.get("time_s") is not None:
        ax.scatter([chosen["cost"]], [chosen["time_s"]], c="C3", marker="*", s=200, zorder=5,
                   label="recommended plan (predicted)")
    if opt is not None and opt.ok and job_time(opt) is not None and \
            job_cost(opt) is not None:
        ax.scatter([job_cost(opt)], [job_time(opt)], c="C2", marker="D", s=60, zorder=5,
                   label="recommended, real run")
    ax.set_xlabel("job cost ($)")
    ax.set_ylabel("job time (s)")
    ax.legend(fontsize=7)
    ax.set_title("Cost/time trade-off", fontsize=11)
    save_figure(fig, path)


def plot_allocation(path: Path, decisions: pd.DataFrame) -> None:
    from phases.plots import phase_color

    fig, axes = plt.subplots(3, 1, figsize=(7, 5), sharex=True)
    steps = decisions["step"].to_numpy()
    for k, ph in zip(steps, decisions["phase"], strict=True):
        for ax in axes:
            ax.axvspan(k - 0.5, k + 0.5, color=phase_color(int(ph)), alpha=0.25, lw=0)
    for ax, col, label in zip(axes, ("cpus", "memory_gb", "batch_size"),
                              ("CPU threads", "memory (GB)", "batch size"), strict=True):
        ax.step(steps, decisions[col], where="mid", c="k")
        ax.set_ylabel(label, fontsize=9)
    axes[-1].set_xlabel("adjustment interval (tenths of the job); background: phase")
    fig.suptitle("Recommended allocation over the job", fontsize=11)
    save_figure(fig, path)


def plot_curves(path: Path, curves: dict[str, pd.DataFrame], optimum: float | None) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for name, curve in curves.items():
        if not curve.empty and "episode_return" in curve:
            ax.plot(curve["episode"], curve["episode_return"], label=name)
    if optimum is not None:
        ax.axhline(optimum, c="k", ls="--", lw=1, label="DP optimum (noise-free)")
    ax.set_xlabel("training episodes")
    ax.set_ylabel("mean episode return")
    ax.legend(fontsize=8)
    ax.set_title("Learning curves (noisy training episodes)", fontsize=11)
    save_figure(fig, path)


def plot_phases(path: Path, trace: pd.DataFrame, labels: np.ndarray) -> None:
    from phases.plots import plot_trace

    plot_trace(trace[["cpu_cores", "mem_gb"]].to_numpy(dtype=float), labels,
               times=trace["time_s"].to_numpy(dtype=float), features=["cpu_cores", "mem_gb"],
               title="Baseline trace by phase (default phase model)", path=path)


# ---------------------------------------------------------------------------------- writing

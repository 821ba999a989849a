"""The report's scaling section: how far running more data-parallel workers pays.

For a job launched by torchrun whose workers were measured, a plot and a table of the fitted
model's goodput, job time and cost against the number of workers (at the recommended setting's
cores and batch per worker), with every measured trial's time and cost to the same loss
beside it, and the communication term the multi-worker trials gave
(:func:`optimizer.search.after_loop.scaling.scaling_curve`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimizer.reports.plots import plt, save_figure
from optimizer.reports.render import Report, dollars, fmt


def plot_scaling(path: Path, scaling: dict[str, Any] | None) -> bool:
    """Goodput and job cost against workers: the model's curve and the measured points. False
    (nothing written) without a scaling curve."""
    if not scaling or not (scaling.get("modelled") or scaling.get("measured")):
        return False
    model, measured = scaling["modelled"], scaling.get("measured") or []
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    r = [m["replicas"] for m in model]
    if model:
        left.plot(r, [m["goodput"] for m in model], "-", color="0.5", label="model")
    if any("job_cost" in m for m in model):
        right.plot(r, [m.get("job_cost", float("nan")) for m in model], "-", color="0.5",
                   label="model")
    for i, b in enumerate(sorted({m["global_batch"] for m in measured if m["global_batch"]})):
        pts = [m for m in measured if m["global_batch"] == b]
        right.plot([m["replicas"] for m in pts], [m["job_cost"] for m in pts], "o",
                   color=f"C{i % 10}", label=f"measured, global batch {b}")
    left.set_xlabel("data-parallel workers")
    left.set_ylabel("goodput (samples/s x efficiency)")
    right.set_xlabel("data-parallel workers")
    right.set_ylabel("job cost to the same loss ($)")
    ticks = sorted({*r, *(m["replicas"] for m in measured)})
    for ax in (left, right):
        ax.set_xticks(ticks)
        ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def scaling_section(r: Report, scaling: dict[str, Any] | None, figure: Path | None) -> None:
    """Add the section (nothing for a job that ran one worker)."""
    if not scaling:
        return
    r.heading("Data-parallel workers")
    alpha, beta = scaling.get("alpha_r"), scaling.get("beta_r")
    pts = scaling.get("sync_points") or []
    fitted = (f"The communication term fitted to {len(pts)} multi-worker trial(s): "
              f"{fmt(alpha, '.3g')} s per step, plus {fmt(beta, '.3g')} s for each worker "
              "beyond two." if alpha is not None else
              "No workload model could be fitted, so no curve: the measured trials alone.")
    r.paragraph(
        "Workers split the job's samples; each step they all-reduce their gradients. "
        f"{fitted} The statistical efficiency of the global batch (per-worker batch x "
        "workers) sets how much of the extra throughput is progress.")
    if scaling.get("modelled"):
        r.table([{"workers": m["replicas"], "CPUs": m["cpus"],
                  "batch per worker": m["batch_per_worker"], "global batch": m["global_batch"],
                  "samples/s (model)": fmt(m["throughput"], ".4g"),
                  "efficiency": fmt(m["efficiency"], ".2f"), "goodput": fmt(m["goodput"], ".4g"),
                  "job time (s)": fmt(m.get("job_time_s"), ".3g"),
                  "job cost": dollars(m.get("job_cost"))} for m in scaling["modelled"]])
    measured = scaling.get("measured") or []
    if measured:
        r.paragraph("Measured trials, time and cost to the same loss:")
        r.table([{"trial": m["trial_id"], "workers": m["replicas"], "CPUs": m["cpus"],
                  "batch per worker": m["batch_per_worker"], "global batch": m["global_batch"],
                  "efficiency": fmt(m["efficiency"], ".2f"),
                  "job time (s)": fmt(m["job_time_s"], ".3g"),
                  "job cost": dollars(m["job_cost"])} for m in measured])
    if figure is not None:
        r.figure(figure, "Goodput and cost against data-parallel workers: model and measured")

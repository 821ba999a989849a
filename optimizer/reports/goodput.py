"""The report's goodput section: is the recommended batch size still training as well?

A larger batch is cheaper per sample but, at the same epochs and learning rate, takes fewer
optimizer steps; what a user pays for is the time and cost to reach the same loss. The
section shows, for the recommended batch against the script's own, samples/s, the loss
progress per sample the probe measured, statistical efficiency, goodput (samples/s ×
efficiency) and the time and cost to the same training progress, with the gradient noise
scale and its interval, and a plot of efficiency against batch size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from optimizer.reports.plots import plt, save_figure
from optimizer.reports.render import Report, dollars, fmt


def _interval(value: Any, low: Any, high: Any, fmt: str) -> str:
    if value is None or value != value:  # None or NaN
        return "not measured"
    text = format(value, fmt)
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and \
            np.isfinite(low) and np.isfinite(high):
        text += f" ({format(low, fmt)} to {format(high, fmt)})"
    return text


def plot_efficiency(path: Path, goodput: dict[str, Any]) -> bool:
    """Efficiency against batch size: the noise-scale curve and the values in use. False (and
    nothing written) when efficiency is off."""
    eff = {int(b): float(v) for b, v in (goodput.get("efficiency") or {}).items()}
    ref, phi = goodput.get("ref_batch"), float(goodput.get("phi_used") or 0.0)
    if not eff or not ref:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.2))
    lo, hi = min(eff) / 2, max(eff) * 4
    grid = np.geomspace(max(lo, 1), hi, 100)
    if phi > 0:
        ax.plot(grid, (phi + ref) / (phi + grid), color="0.5",
                label=f"noise-scale form, phi = {phi:,.0f}")
    ax.plot(list(eff), list(eff.values()), "o", color="C0", label="in use (measured batches)")
    ax.axvline(ref, color="C2", ls=":", label=f"the script's batch ({ref})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("efficiency (progress per sample)")
    ax.set_ylim(0, max(1.1, max(eff.values()) * 1.1))
    ax.legend(fontsize=8)
    save_figure(fig, path)
    return True


_SOURCE = {"measured": ", measured", "noise scale": ", from the noise scale",
           "bound": ", at most (a probe stopped short of the loss)"}


def _judged(row: dict[str, Any]) -> str:
    """Where a batch was judged below its estimate: the low end of its interval (the times
    and costs beside it are at that value)."""
    judged, value = row.get("efficiency_judged"), row.get("efficiency")
    if judged is None or value is None or abs(float(judged) - float(value)) < 5e-3:
        return ""
    return f"; judged at {float(judged):.2f}"


def goodput_section(r: Report, goodput: dict[str, Any] | None, figure: Path | None) -> None:
    """Add the section (a short paragraph when nothing was measured); ``figure``: the plot
    :func:`plot_efficiency` wrote, if any."""
    r.heading("Batch size and training progress (goodput)")
    if not goodput:
        r.paragraph("Statistical efficiency was not measured in this run.")
        return
    r.paragraph(goodput.get("note") or "")
    if any(_judged(row) for row in goodput.get("comparison") or []):
        r.paragraph("A batch other than the script's own is judged at the low end of its "
                    "efficiency's 90% interval: changing the batch risks how well the job "
                    "trains, so it must win within what was measured.")
    noise = goodput.get("noise_scale") or {}
    r.paragraph("Gradient noise scale (samples): " + (
        _interval(noise.get("value"), noise.get("low"), noise.get("high"), ",.0f")
        + f", from {noise.get('source')}" if noise.get("value") is not None
        else f"not measured ({noise.get('why') or 'no gradients recorded'})")
        + f". Efficiency decided by: {goodput.get('decided_by')}.")
    rows = []
    for row in goodput.get("comparison") or []:
        rows.append({
            "": row.get("role"), "batch": row.get("batch_size"), "CPUs": row.get("cpus"),
            "samples/s": fmt(row.get("throughput"), ",.0f"),
            "loss progress per sample": _interval(row.get("progress_per_sample"),
                                                  row.get("progress_low"),
                                                  row.get("progress_high"), ".2e"),
            "efficiency": _interval(row.get("efficiency"), row.get("efficiency_low"),
                                    row.get("efficiency_high"), ".2f")
            + _SOURCE.get(row.get("efficiency_source"), "") + _judged(row),
            "goodput (samples/s)": fmt(row.get("goodput"), ",.0f"),
            "time to the same loss": fmt(row.get("time_to_same_progress_s"), ",.1f", unit=" s"),
            "cost to the same loss": dollars(row.get("cost_to_same_progress")),
        })
    if rows:
        r.table(rows)
    if (goodput.get("heldout") or {}).get("note"):
        r.paragraph(goodput["heldout"]["note"])
    if goodput.get("learning_rate"):
        r.paragraph(goodput["learning_rate"].capitalize() + ".")
    if figure is not None:
        r.figure(figure, "Statistical efficiency against batch size (1 at the script's own)")


__all__ = ["goodput_section", "plot_efficiency"]

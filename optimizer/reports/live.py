"""The report's section on the live plan: the agents' allocation per stage, what it measured
beside the static recommendation, and the cores held over time (issue 40)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimizer.reports.render import Report, dollars


def plot_live(path: Path, live: dict[str, Any] | None) -> bool:
    """Cores held over time by the measured live run against the static run's; False when
    nothing was measured."""
    measured = (live or {}).get("measured") or {}
    run, static = measured.get("live"), measured.get("static")
    if not run or not run.get("timeline") or not static:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [p[0] for p in run["timeline"]] + [run["time_s"]]
    cpus = [p[1] for p in run["timeline"]]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.step(t, cpus + cpus[-1:], where="post", label="live plan")
    static_cpus = (live.get("plan") or {}).get("fallback", {}).get("cpus")
    if static_cpus:
        ax.hlines(static_cpus, 0, static["time_s"], colors="grey", linestyles="--",
                  label="static")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("cores held")
    ax.set_ylim(0, max(cpus + [static_cpus or 1]) + 0.5)
    ax.legend(loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def live_section(r: Report, live: dict[str, Any] | None, figure: Path | None = None) -> None:
    """Add the section (a line when no plan was made, and why)."""
    r.heading("Live plan: the allocation per stage while the job runs")
    if not live:
        r.paragraph("No live plan was made (--live-plan off, or the workload model could not "
                    "be fitted).")
        return
    r.paragraph(live.get("why", ""))
    plan = live.get("plan")
    if plan:
        rows = [{"stage": name, "cores": e["allocation"]["cpus"],
                 "memory request": f"{e['allocation']['memory_gb']:.2f} GB"
                 if e["allocation"].get("memory_gb") else "as static",
                 "share of the run": f"{e['share']:.0%}" if e.get("share") is not None else "",
                 "why": e.get("why", "")}
                for name, e in plan["phases"].items()]
        fb = plan["fallback"]
        rows.append({"stage": "any other (static)", "cores": fb["cpus"],
                     "memory request": f"{fb.get('memory_gb') or 0:.2f} GB",
                     "share of the run": "", "why": "the static recommendation"})
        r.table(rows)
        r.paragraph(f"Written to {live.get('plan_file', 'live-plan.json')}; run a job under it "
                    "with `python -m optimizer run --plan <run folder> -- <the job's command>`."
                    " GPUs, data-loader workers and the batch size stay as the job started "
                    "them: they cannot change under a running script.")
    measured = live.get("measured")
    if measured:
        r.table([{"run": name, "status": m["status"], "time": f"{m['time_s']:.1f} s",
                  "cost (billed per interval)": dollars(m["cost"]),
                  "changes": m.get("changes", 0),
                  "stages seen": ", ".join(m.get("phases_seen") or {}) or "-"}
                 for name, m in measured.items()])
    if live.get("verdict"):
        r.paragraph("Verdict: " + live["verdict"] + ".")
    elif live.get("not_measured"):
        r.paragraph("Not measured: " + live["not_measured"] + ".")
    if figure is not None:
        r.figure(figure, "Cores held by the live plan's run (the static run's dashed)")


__all__ = ["live_section", "plot_live"]

"""The report's section on the live plan: the agents' allocation per stage, what it measured
beside the static recommendation, and the cores held over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_text
from optimizer.reports.k8s_resize import (
    k8s_live_job_yaml,
    k8s_live_rbac_yaml,
    live_recommendation,
)
from optimizer.reports.render import Report, dollars, fmt
from optimizer.trials.live.plan import LivePlan


def write_live_k8s(run_dir: Path, live: dict[str, Any] | None, env: dict[str, str], *,
                   name: str, command: list[str], image: str | None,
                   sla_time_s: float | None = None, predicted_time_s: float | None = None,
                   shm: bool = False) -> dict[str, Path]:
    """For a live plan: ``k8s-live-job.yaml`` (the plan's ConfigMap and a Job whose pod is
    resized in place at stage changes; ``shm``: with ``/dev/shm`` for DataLoader workers)
    and ``k8s-live-rbac.yaml`` (the resize permissions, bounded to the plan);
    ``live["kubernetes"]`` gets the per-stage requests for ``recommendation.json``."""
    if not live or not live.get("plan"):
        return {}
    plan = LivePlan.from_dict(live["plan"])
    live["kubernetes"] = live_recommendation(plan)
    job, rbac = run_dir / "k8s-live-job.yaml", run_dir / "k8s-live-rbac.yaml"
    verdict = live.get("verdict") or live.get("not_measured") or ""
    atomic_write_text(job, k8s_live_job_yaml(
        plan, env, name=name, command=command, image=image,
        comment=f"cloudopt live plan ({plan.source}); {verdict}", sla_time_s=sla_time_s,
        predicted_time_s=predicted_time_s, shm=shm))
    atomic_write_text(rbac, k8s_live_rbac_yaml(name, plan))
    return {"k8s_live_job": job, "k8s_live_rbac": rbac}


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
    model = live.get("model") or {}
    if model:
        # What decided: each policy's whole-job forecast on the stage model, its score under
        # the preference against the static allocation's (1.000; agents only) and the
        # per-interval reward's share of the optimum, which the agents were trained on.
        r.table([{"policy": name, "forecast time": fmt(o.get("time_s"), ".1f", unit=" s"),
                  "forecast cost": dollars(o.get("cost")),
                  "within the limits": "yes" if o.get("within_limits", True) else "no",
                  "score vs static": fmt(o["job_score"], ".3f") if "job_score" in o else "",
                  "reward, share of optimum": fmt(o.get("share_of_optimum"), ".1%")}
                 for name, o in model.items()])
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
                     "memory request": fmt(fb.get("memory_gb"), ".2f", unit=" GB"),
                     "share of the run": "", "why": "the static recommendation"})
        r.table(rows)
        r.paragraph(f"Written to {live.get('plan_file', 'live-plan.json')}; run a job under it "
                    "with `python -m optimizer run --plan <run folder> -- <the job's command>`,"
                    " or on Kubernetes with k8s-live-rbac.yaml then k8s-live-job.yaml (the pod "
                    "is resized in place at each stage change; limits stay at the largest "
                    "stage, so its QoS class never changes). GPUs, data-loader workers and "
                    "the batch size stay as the job started them: they cannot change under a "
                    "running script.")
    measured = live.get("measured")
    if measured:
        r.table([{"run": name, "status": m.get("status"),
                  "time": fmt(m.get("time_s"), ".1f", unit=" s"),
                  "cost (billed per interval)": dollars(m.get("cost")),
                  "changes": m.get("changes", 0),
                  "stages seen": ", ".join(m.get("phases_seen") or {}) or "-"}
                 for name, m in measured.items()])
    if live.get("verdict"):
        r.paragraph("Verdict: " + live["verdict"] + ".")
    elif live.get("not_measured"):
        r.paragraph("Not measured: " + live["not_measured"] + ".")
    if figure is not None:
        r.figure(figure, "Cores held by the live plan's run (the static run's dashed)")


__all__ = ["live_section", "plot_live", "write_live_k8s"]

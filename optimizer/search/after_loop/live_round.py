"""The search's last stage for a phased job: the live plan, measured beside the static one.

After the closed loop has chosen a static allocation, the agents plan per stage on the
stages the recorded trials went through (:func:`optimizer.search.live.live_plan.
build_live_plan`). The plan is written to ``live-plan.json`` (``python -m optimizer run
--plan`` runs a job under it). Where it changes something and the job is short enough to run
whole within the time box, the static allocation and the live plan then run back to back,
each to its end, the live one billed per interval at what it held (in ``live/``, not
``trials/``: a live run measures no single allocation); the live plan is recommended only
where it measured at least 5% cheaper at no more than 5% more time. A plan that moves only
the memory limit is written, not measured. They run only where the budget of
real runs has room for both; otherwise the plan is written but not measured, and
``rec["live"]`` says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.job import Job
from optimizer.search.core.port import SearchPort
from optimizer.search.core.state import SearchState
from optimizer.search.live.live_plan import TIME_SLACK, PlanResult, build_live_plan
from optimizer.trials.executors.base import TrialRequest
from optimizer.trials.live.controller import PlanDecider
from optimizer.trials.live.plan import LivePlan
from optimizer.trials.live.session import LiveSetup
from optimizer.trials.records import TrialSummary

if TYPE_CHECKING:  # types only
    from optimizer.trials.training import TrainingModuleManager

LIVE_RUNS = 2
"""The static allocation and the live plan, back to back."""
MIN_SAVING = 0.05
"""The live plan is recommended only where its one measured run is at least this much cheaper
than the static one beside it: two back-to-back runs of the same allocation differ by up to
5-10% on a shared 2-core machine (benchmarks/README.md, live adaptation), and a smaller
difference is as likely chance as the plan."""


def _recorded(run_dir: Path) -> list[tuple[TrialSummary, Path]]:
    out = []
    for d in sorted((run_dir / "trials").glob("*")):
        if (d / "summary.json").is_file():
            try:
                out.append((TrialSummary.load(d), d))
            except Exception:  # noqa: BLE001 - an unreadable record is no stage evidence
                continue
    return out


def live_round(port: SearchPort, manager: TrainingModuleManager, env_config: Any,
               static: Allocation, run_dir: Path, job: Job,
               measure: bool = True) -> dict[str, Any]:
    """Plan, write and (budget and job length allowing) measure the live plan; the dict that
    goes into ``recommendation.json`` as ``live``."""
    result = _plan(port, env_config, static, run_dir, job)
    if isinstance(result, str):
        return {"why": result, "recommended": False, "measured": None}
    out: dict[str, Any] = {"why": result.why, "recommended": False, "measured": None}
    if result.plan is None:
        return out
    plan: LivePlan = result.plan
    out["plan"] = plan.to_dict()
    out["plan_file"] = str(plan.save(run_dir))
    out["model"] = result.outcomes
    port.say(f"live plan: {result.why}; written to {out['plan_file']}", always=True)
    why_not, say = _not_measured(port, plan, run_dir, job, measure)
    if why_not:
        out["not_measured"] = why_not
        if say:
            port.say(f"live plan: {why_not}", always=True)
        return out
    out.update(_measure_pair(port, manager, plan, static, run_dir, job))
    port.say(f"live plan: {out['verdict']}", always=True)
    return out


def _plan(port: SearchPort, env_config: Any, static: Allocation, run_dir: Path,
          job: Job) -> PlanResult | str:
    """The agents' per-stage plan, or why there is none when planning failed (said, with the
    traceback in the run's log)."""
    agent_s = (job.agent_seconds or port.config.run.agent_seconds) / 2
    from optimizer.trials.phase_profile import load_detector

    try:
        return build_live_plan(_recorded(run_dir), env_config, port.config, static,
                               time_budget_s=agent_s, quiet=port.quiet,
                               detector=lambda: load_detector(job.phase_model))
    except Exception as exc:  # noqa: BLE001 - the static recommendation is made; keep it
        import traceback

        why = f"no live plan: planning per stage failed ({type(exc).__name__}: {exc})"
        if port.log_path is not None:  # the traceback for a bug report, never on the console
            with open(port.log_path, "a", encoding="utf-8") as fh:
                fh.write(traceback.format_exc())
        port.say(f"live plan: {why}; the static recommendation stands", always=True)
        return why


def _not_measured(port: SearchPort, plan: LivePlan, run_dir: Path, job: Job,
                  measure: bool) -> tuple[str | None, bool]:
    """Why the written plan is not run beside the static allocation (None: it is), and whether
    the console hears it."""
    if plan.is_static:
        return "the plan holds the static allocation in every stage", False
    if all(e.allocation.cpus == plan.fallback.cpus for e in plan.phases.values()):
        # Only the memory limit moves: the job runs as it does under the static allocation,
        # and the bill differs by a few MB-hours, less than two runs can tell apart.
        return (f"the plan holds the static allocation's {plan.fallback.cpus} "
                "core(s) in every stage and changes only the memory limit, "
                "which the job does not run faster or slower for: not measured, "
                "the static allocation stays the recommendation"), True
    if not measure:
        return "--live-plan write: written, not measured", False
    budget = port.budget
    if budget is not None and not budget.allows(LIVE_RUNS):
        return (f"the budget of {budget.total} real runs is spent; raise "
                "--budget to measure it, or run it with `python -m optimizer "
                f"run --plan {run_dir} -- …`"), False
    run = port.config.run
    longest = max((t.predicted_total_time_s or t.wall_time_s) for t, _ in _recorded(run_dir))
    box = job.probe_seconds if job.probe_seconds is not None else run.probe_seconds
    if box and longest > 2 * max(box, 1.0) and longest > 0.5 * run.trial_timeout_s:
        return (f"the job takes about {longest:.0f} s, too long to run whole "
                "twice here; run it with `python -m optimizer run --plan`"), False
    return None, False


def _measure_pair(port: SearchPort, manager: TrainingModuleManager, plan: LivePlan,
                  static: Allocation, run_dir: Path, job: Job) -> dict[str, Any]:
    """The static allocation and the live plan run back to back, and the verdict."""
    from optimizer.trials.phase_profile import load_detector

    most = max(e.allocation.cpus for e in plan.phases.values())
    live_alloc = Allocation(static.gpus, max(most, static.cpus),
                            float(plan.memory_max_gb or static.memory_gb),
                            static.batch_size, static.workers)
    first = plan.allocation_for(plan.schedule[0] if plan.schedule else None)
    setup = LiveSetup(PlanDecider(plan), plan.interval_s, label="live plan",
                      detector=load_detector(job.phase_model)
                      if plan.phase_source == "detector" else None, start_cpus=first.cpus)
    # Not in trials/: a live run is no measurement of one allocation, and the search's
    # choices (and a resumed run's) must not take it for one.
    static_t = _run(port, manager, static, run_dir / "live" / f"static-{static.key()}", None)
    live_t = _run(port, manager, live_alloc, run_dir / "live" / f"plan-{static.key()}", setup)
    out: dict[str, Any] = {"measured": {
        name: {"trial": t.trial_id, "status": t.status, "time_s": t.wall_time_s,
               "cost": t.cost, "changes": t.live.get("changes", 0),
               "phases_seen": t.live.get("phases_seen", {}),
               "timeline": t.live.get("timeline", [])}
        for name, t in (("static", static_t), ("live", live_t))}}
    if static_t.status != "completed" or live_t.status != "completed":
        out["verdict"] = "a measuring run did not complete: the static allocation stays"
        return out
    dt = live_t.wall_time_s / static_t.wall_time_s - 1
    dc = live_t.cost / static_t.cost - 1
    out["time_change"], out["cost_change"] = dt, dc
    out["recommended"] = dc <= -MIN_SAVING and dt <= TIME_SLACK
    out["verdict"] = (f"measured {-dc:.0%} cheaper at {dt:+.0%} time: recommended"
                      if out["recommended"] else
                      f"measured {dc:+.0%} cost at {dt:+.0%} time (recommended from "
                      f"{MIN_SAVING:.0%} cheaper at no more than {TIME_SLACK:.0%} more "
                      "time): the static allocation stays the recommendation")
    return out


def _run(port: SearchPort, manager: TrainingModuleManager, alloc: Allocation, trial_dir: Path,
         live: LiveSetup | None) -> TrialSummary:
    recorded = manager.recorded_trial(trial_dir)
    if recorded is not None:
        return recorded
    run = port.config.run
    request = TrialRequest(alloc, trial_dir, probe_seconds=None, timeout_s=run.trial_timeout_s,
                           monitor_interval=run.monitor_interval, live=live)
    return [s for _, s in port.trial_executor().run(manager, [request],
                                                    port.config.resources)][0]


class LiveRound:
    """Stage: for ``--live-plan measure`` or ``write``, the job's stages planned per stage at
    the recommended allocation (:func:`live_round`); ``state.live`` stays None when off, or
    when no model was fitted."""

    name = "live-round"

    def run(self, state: SearchState) -> None:
        job = state.job
        mode = job.spec.live_plan
        if mode == "off" or state.round is None or state.round.env_config is None:
            return
        assert state.recommended is not None  # the final choice runs first
        state.live = live_round(state.port, job.manager, state.round.env_config,
                                state.recommended, job.run_dir, job.spec,
                                measure=mode == "measure")


__all__ = ["LIVE_RUNS", "LiveRound", "live_round"]

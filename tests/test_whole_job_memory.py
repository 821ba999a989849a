"""A memory request that holds for the whole job, and a report that never crashes (issue 62).

A probe's peak says how much memory the job needs at least: the request covers the largest
peak a whole run reached at the same batch size, else the probes' growth projected over the
job, and says which run it comes from. The report renders what it has: a fit without an R²,
no trace, no whole run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.foundation.memory import MEMORY_MARGIN
from optimizer.search.choice import memory_entry, objective_table, recommended_allocation
from optimizer.search.memory_need import memory_need
from optimizer.trials.monitor import memory_growth_rate
from optimizer.trials.records import TrialSummary

DATA = Path(__file__).resolve().parent / "data"


def _probe(tid: str, cpus: int, peak: float, growth: float | None, *, job_s: float = 80.0,
           wall: float = 1.3, batch: int = 64) -> TrialSummary:
    return TrialSummary(tid, "probe", Allocation(0, cpus, 4.0, batch), wall_time_s=wall,
                        samples=100.0 * wall, throughput=100.0, total_samples=8000.0,
                        predicted_total_time_s=job_s, predicted_total_cost=0.001,
                        hourly_cost=0.05 * cpus, mem_gb_peak=peak, mem_gb_growth=growth)


def _whole(tid: str, cpus: int, limit: float, peak: float, status: str = "completed",
           batch: int = 64) -> TrialSummary:
    return TrialSummary(tid, status, Allocation(0, cpus, limit, batch),
                        reason="oom" if status == "failed" else "", wall_time_s=80.0,
                        samples=8000.0, throughput=100.0, total_samples=8000.0,
                        hourly_cost=0.05 * cpus, cost=0.002, mem_gb_peak=peak)


# -------------------------------------------------------------------- the rule, unit by unit
def test_a_whole_run_at_the_same_batch_sizes_the_request_not_the_probe():
    """The user's figures: the 1-CPU probe peaked at 0.355 GB after 1.3 s; the whole run at
    2 CPUs was killed at 8 GB, then completed under 14.5 GB at a 12.65 GB peak."""
    probe = _probe("01-g0-c1-m4-b64", 1, 0.355, None)
    trials = [_probe("00-g0-c2-m4-b64", 2, 0.36, None), probe,
              _whole("whole-g0-c2-m8-b64", 2, 8.0, 8.01, status="failed"),
              _whole("whole-g0-c2-m14.5-b64", 2, 14.5, 12.65)]
    sized = recommended_allocation(probe, trials, batch_settable=True)
    assert (sized.cpus, sized.batch_size) == (1, 64)
    assert sized.memory_gb >= 12.65 * (1 + MEMORY_MARGIN)
    entry = memory_entry(probe, trials)
    assert entry["request_gb"] == sized.memory_gb and entry["peak_gb"] == 12.65
    assert entry["source"] == "whole run" and entry["from_trial"] == "whole-g0-c2-m14.5-b64"
    assert "from the whole run whole-g0-c2-m14.5-b64 (peak 12.65 GB)" in entry["why"]
    assert entry["chosen_peak_gb"] == 0.355 and 0 < entry["slack"] < 0.2
    # the choice prices every setting at that batch at what its whole job needs
    cfg = load_config(overrides={"resources": {"gpu_count_max": 0, "cpu_count_max": 2,
                                               "memory_max": 16.0}})
    table = objective_table(trials, cfg, "cost")
    assert (table["memory_gb"] >= 12.65 * (1 + MEMORY_MARGIN)).all()
    # a whole run at another batch size says nothing of this one
    other = [probe, _whole("whole-b128", 2, 14.5, 12.65, batch=128)]
    assert memory_need(probe, other).gb == pytest.approx(0.355)


def test_without_a_whole_run_the_probes_growth_is_projected_over_the_job():
    probe = _probe("01", 1, 0.355, 0.16, job_s=80.0, wall=1.3)
    flat = _probe("00", 2, 0.30, 0.0, job_s=40.0)
    projected = 0.355 + 0.16 * (80.0 - 1.3)  # 12.95 GB by the job's end
    need = memory_need(flat, [flat, probe])
    assert need.source == "projected" and need.trial_id == "01"
    assert need.gb == pytest.approx(projected)
    assert "projected from the probes' growth of 0.16 GB/s over the job's 80 s" in need.words()
    assert recommended_allocation(flat, [flat, probe], True).memory_gb >= projected
    # memory that did not grow: the probe's peak, and the words say why
    still = memory_need(flat, [flat])
    assert still.source == "probe" and still.gb == pytest.approx(0.30)
    assert "did not grow" in still.words()
    unmeasured = memory_need(_probe("02", 1, 0.3, None), [])
    assert "growth unmeasured" in unmeasured.words()


def test_a_kill_at_the_same_batch_is_a_floor():
    probe = _probe("01", 1, 0.4, 0.0)
    killed = _whole("03-g0-c2-m4-b64", 2, 4.0, 4.01, status="failed")
    need = memory_need(probe, [probe, killed])
    assert need.source == "out-of-memory kill" and need.gb == 4.0
    assert "4 GB limit at which run 03-g0-c2-m4-b64 was killed" in need.words()


def test_growth_is_measured_over_the_steady_part_and_noise_is_flat():
    times = [0.2 * k for k in range(1, 11)]  # 0.2 .. 2.0 s
    loading = [0.05 + 0.5 * t if t < 1.0 else 0.55 for t in times]  # grows while loading only
    assert memory_growth_rate(times, loading, since_s=1.0) == 0.0
    steady = [0.1 + 0.16 * t for t in times]
    assert memory_growth_rate(times, steady, since_s=1.0) == pytest.approx(0.16, rel=0.01)
    assert memory_growth_rate(times, steady) == pytest.approx(0.16, rel=0.01)  # later half
    noisy = [0.5 + (0.004 if k % 2 else 0.0) for k in range(10)]
    assert memory_growth_rate(times, noisy, since_s=0.0) == 0.0
    # a probe stopped right after its first steps: the last two samples tell
    assert memory_growth_rate(times, steady, since_s=1.95) == pytest.approx(0.16, rel=0.01)
    assert memory_growth_rate([0.2], [0.1]) is None


# ---------------------------------------------------------------- the report renders what it has
def test_the_report_renders_a_fit_without_r2_no_trace_and_no_whole_run(tmp_path):
    from agents.metrics import RLMetricsTracker
    from optimizer.foundation.result import Recommendation, RunResult
    from optimizer.reports.figures import run_figures
    from optimizer.reports.run_report import ReportInputs, write_outputs

    cfg = load_config(overrides={"resources": {"gpu_count_max": 0, "cpu_count_max": 2,
                                               "memory_max": 4.0}})
    probe = _probe("00-g0-c1-m4-b64", 1, 0.3, None)
    alloc = recommended_allocation(probe, [probe], batch_settable=True)
    rec = Recommendation(
        allocation=alloc, agent="baseline-trial", final_trial=probe.trial_id,
        choice="the only trial",
        fit={"r2_throughput": None, "max_rel_error": None, "n_trials": None},
        rounds=[{"round": 0, "action": "stop", "proposed_by": "budget", "why": "spent"}],
        memory=memory_entry(probe, [probe]),
        measured={"trial": probe.trial_id, "job_time_s": None, "job_cost": None,
                  "throughput": None, "time_is": None},
        goodput={"note": "off", "comparison": [
            {"role": "recommended", "batch_size": 64, "cpus": 1, "throughput": None,
             "efficiency": None, "goodput": None, "time_to_same_progress_s": None,
             "cost_to_same_progress": None}]})
    result = RunResult("cost", rec, *run_figures(probe, probe, cfg.sla))
    paths = write_outputs(ReportInputs(tmp_path, result, [probe], probe, probe, cfg,
                                       RLMetricsTracker(tmp_path / "metrics")))
    md = paths["report_md"].read_text()
    assert "R² throughput n/a" in md and "largest error n/a" in md
    assert "Memory: request" in md and "growth unmeasured" in md
    assert paths["report_html"].read_text().count("n/a") >= 2
    saved = json.loads(paths["recommendation"].read_text())
    assert saved["memory"]["source"] == "probe" and saved["workload_fit"]["r2_throughput"] is None
    # a recommendation written before the memory entry said where it came from
    from optimizer.reports.decision import memory_words_paragraph

    old = memory_words_paragraph({"peak_gb": 0.3, "request_gb": 0.375, "slack": None})
    assert "measured on the chosen allocation" in old and "slack n/a" in old


def test_the_jobs_deadline_follows_the_time_claimed_for_its_command(tmp_path):
    """A recommendation claiming a 2000 s job gets a deadline of 3x that (the SLA unset): a
    hung job releases its nodes, a slow one still finishes. It was 3600 s whatever the job."""
    import yaml

    from agents.metrics import RLMetricsTracker
    from optimizer.foundation.result import Recommendation, RunResult
    from optimizer.reports.figures import run_figures
    from optimizer.reports.run_report import ReportInputs, write_outputs

    cfg = load_config(overrides={"resources": {"gpu_count_max": 0, "cpu_count_max": 2,
                                               "memory_max": 4.0}})
    probe = _probe("00-g0-c1-m4-b64", 1, 0.3, None, job_s=2000.0)
    rec = Recommendation(
        allocation=recommended_allocation(probe, [probe], batch_settable=True),
        agent="baseline-trial", final_trial=probe.trial_id, choice="the only trial",
        memory=memory_entry(probe, [probe]), predicted={"time_s": 1900.0},
        measured={"trial": probe.trial_id, "job_time_s": 2000.0, "time_is": "predicted"})
    assert rec.job_time_s() == 2000.0
    result = RunResult("cost", rec, *run_figures(probe, probe, cfg.sla))
    paths = write_outputs(ReportInputs(tmp_path, result, [probe], probe, probe, cfg,
                                       RLMetricsTracker(tmp_path / "metrics")))
    text = paths["k8s_job"].read_text()
    [job] = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Job"]
    assert job["spec"]["activeDeadlineSeconds"] == 6000
    assert "3x the predicted job time (2000 s)" in text
    # neither measured nor predicted: no claim, the deadline falls back as before
    bare = Recommendation(allocation=rec.allocation, agent="x", final_trial="00", choice="c")
    assert bare.job_time_s() is None


# ------------------------------------------------------------------------------- end to end
def test_a_growing_job_gets_the_memory_of_its_whole_run(tmp_path, repo_root):
    """Probes of 1 s see a fraction of the ~0.4 GB the whole job reaches; the job's size is
    only printed as a rate, so a whole run measures it, and its peak sizes the request."""
    config = tmp_path / "small.toml"
    config.write_text("[resources]\nmemory_min = 0.1\nmemory_max = 2.0\ncpu_count_max = 2\n"
                      "[run]\ntrial_timeout_s = 20.0\nmonitor_interval = 0.2\n")
    out = tmp_path / "run"
    proc = run_main(
        "--train-file", str(DATA / "growing_memory_train.py"), "--config", str(config),
        "--preference", "cost", "--baseline-samples", "2", "--probe-seconds", "1",
        "--agent-seconds", "0.5", "--live-plan", "off", "--refine-rounds", "0",
        "--runoff-rounds", "0", "--output", str(out), "--quiet", cwd=repo_root,
        env={"GROW_MB": "400"})
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    assert "Traceback" not in said
    rec = json.loads((out / "recommendation.json").read_text())
    wholes = [TrialSummary.load(d) for d in (out / "trials").iterdir()
              if (d / "summary.json").exists()]
    peak = max(t.mem_gb_peak for t in wholes if t.status == "completed")
    assert peak > 0.3  # the job did grow to about 0.4 GB
    assert rec["allocation"]["memory_gb"] >= peak
    assert rec["memory"]["source"] == "whole run" and rec["memory"]["peak_gb"] == peak
    assert "from the whole run" in (out / "report.md").read_text()
    for log in out.rglob("*"):
        if log.is_file() and log.suffix in (".log", ".md", ".html", ".json", ".txt"):
            assert "Traceback" not in log.read_text(errors="replace"), log

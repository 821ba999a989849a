"""Recommendations that hold (issue 18): every trial has a batch size, the final choice is never
worse than a measured trial, memory is sized from the measured peak, and the ResNet-50 trials
that once produced a 1-thread plan no longer do."""

from __future__ import annotations

import ast
import math

import numpy as np
import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.search.acquisition import (
    anchored,
    bootstrap_models,
    next_probe,
    objective_samples,
    predicted_figures,
    ruled_out,
)
from optimizer.search.choice import best_measured, objective_table, right_size_memory
from optimizer.search.expected import dominating_trial
from optimizer.search.workload_fit import fit_workload_model, measurements_from_trials
from optimizer.trials.batch import label_batch
from optimizer.trials.records import TrialSummary
from optimizer.trials.script_scan import env_default, flag_default


@pytest.mark.parametrize(
    ("source", "flag", "expected"),
    [
        ('p.add_argument("--batch-size", type=int, default=64)', "--batch-size", 64),
        ('p.add_argument("-b", "--batch-size", default=32, type=int)', "--batch-size", 32),
        ('@click.option("--bs", default="16")\ndef main(bs): pass', "--bs={}", 16),
        ('p.add_argument("--batch-size", type=int, default=None)', "--batch-size", None),
        ('p.add_argument("--batch-size", default=N)', "--batch-size", None),
        ('p.add_argument("--batch-size", type=int, default=64)\np.set_defaults(batch_size=128)',
         "--batch-size", 128),
        ('p.add_argument("--lr", default=3)', "--batch-size", None),
    ],
)
def test_flag_default_is_read_from_the_source(source, flag, expected):
    assert flag_default(ast.parse(source), flag) == expected


def test_env_default_is_the_fallback_of_the_variable():
    tree = ast.parse('import os\nb = int(os.environ.get("OPTIMIZER_BATCH_SIZE", "96"))')
    assert env_default(tree, "OPTIMIZER_BATCH_SIZE") == 96
    assert env_default(ast.parse('b = os.getenv("OTHER", 8)'), "OPTIMIZER_BATCH_SIZE") is None


def test_manager_knows_the_batch_of_an_argparse_script(repo_root):
    from optimizer.trials.training import TrainingModuleManager

    script = repo_root / "tests" / "data" / "tiny_argparse_train.py"
    mgr = TrainingModuleManager(script, [], "--batch-size")
    assert mgr.batch_control() == "flag" and mgr.default_batch_size() == 48
    assert TrainingModuleManager(script, ["--batch-size=96"], "--batch-size").default_batch_size() == 96
    # Without the flag the batch cannot be set: it is not varied, and no default is claimed.
    plain = TrainingModuleManager(script, [], None)
    assert plain.batch_control() is None and plain.default_batch_size() is None


def test_trials_are_labelled_with_the_batch_they_ran_with(tmp_path):
    t = TrialSummary("00", "probe", Allocation(0, 2, 4.0, None), throughput=100.0)
    assert label_batch(t, tmp_path, 48, settable=True).allocation.batch_size == 48
    (tmp_path / "stdout.log").write_text("model_name=x batch_size=24\n")
    # A printed batch the loader also served is what ran (a config file overrode the flag's
    # default); one the loader did not serve is another batch (an effective one, 16 x 4).
    served = TrialSummary("00", "probe", Allocation(0, 2, 4.0, None), throughput=100.0,
                          probe={"steps": 10, "samples_per_step": 24})
    assert label_batch(served, tmp_path, 48, settable=True).allocation.batch_size == 24
    assert label_batch(t, tmp_path, 48, settable=True).allocation.batch_size == 48
    (tmp_path / "stdout.log").write_text("effective batch size: 64 (16 x 4 accumulation steps)\n")
    accum = TrialSummary("00", "probe", Allocation(0, 2, 4.0, None), throughput=100.0,
                         probe={"steps": 10, "samples_per_step": 16})
    assert label_batch(accum, tmp_path, 16, settable=True).allocation.batch_size == 16
    assert label_batch(accum, tmp_path, None, settable=True).allocation.batch_size == 64
    # Neither settable nor known: a nominal batch, so the model keeps it fixed.
    assert label_batch(t, None, None, settable=False).allocation.batch_size == 1
    assert t.allocation.batch_size is None  # labelling copies
    # A script with no batch flag whose DataLoader the probe saw: the batch it ran with.
    seen = TrialSummary("01", "probe", Allocation(0, 2, 4.0, None), throughput=100.0,
                        probe={"steps": 188, "samples_per_step": 64})
    assert label_batch(seen, None, None, settable=False).allocation.batch_size == 64


def test_right_sized_memory_rounds_up_and_bumps_after_out_of_memory():
    assert right_size_memory(11.0) == 13.0  # 11 × 1.15 = 12.65 GB → 13 GB (512 MiB steps)
    assert right_size_memory(0.01) == 16 / 1024  # the smallest request
    # An OOM kill at a 4 GB limit: the limit is a floor, × 1.15 × 1.2 = 5.52 → 5.75
    assert right_size_memory(3.9, ooms=1, limit_gb=4.0) == 5.75


def _trial(tid, cpus, batch, thr, *, peak=1.0, limit=8.0, total=1e5, status="probe"):
    seconds = total / thr
    return TrialSummary(tid, status, Allocation(0, cpus, limit, batch), throughput=thr,
                        wall_time_s=20.0, mem_gb_peak=peak, total_samples=total,
                        predicted_total_time_s=seconds, predicted_total_cost=1.0)


def test_final_choice_is_the_best_measured_trial_for_the_preference():
    cfg = load_config(overrides={"resources": {"gpu_count_max": 0, "cpu_count_max": 2,
                                               "memory_max": 16.0}})
    trials = [_trial("00", 2, 64, 900.0), _trial("01", 1, 64, 600.0),
              _trial("refine-0", 2, 128, 700.0)]  # the agents' plan, measured: worse
    cheap, row = best_measured(trials, cfg, "cost")
    fast, _ = best_measured(trials, cfg, "time")
    assert cheap.trial_id == "01" and fast.trial_id == "00"
    table = objective_table(trials, cfg, "cost")
    assert row["objective"] == table["objective"].min()
    # Cost is taken at the right-sized memory, not at the limit a trial ran under.
    assert row["memory_gb"] == right_size_memory(1.0)


# What a 16-CPU/H100 machine measured for an unmodified ResNet-50 script (issue 18), img/s;
# "default" is its argparse default batch, 128.
RESNET50 = [(16, None, 2310), (8, None, 2691), (16, 256, 3440), (8, 256, 3880), (8, 64, 1972),
            (16, 64, 2196), (1, None, 613), (1, None, 736)]


def _resnet_trials() -> list[TrialSummary]:
    out = []
    for i, (cpus, batch, thr) in enumerate(RESNET50):
        t = TrialSummary(f"{i:02d}", "probe", Allocation(1, cpus, 58.5, batch), throughput=thr,
                         wall_time_s=20.0, mem_gb_peak=11.0, total_samples=1.28e6,
                         predicted_total_time_s=1.28e6 / thr, cpu_util_mean=min(95.0, 100.0 * 6 / cpus), gpu_util_mean=80.0)
        out.append(label_batch(t, None, 128, settable=True))
    return out


def test_resnet50_records_give_a_fitted_model_and_no_one_thread_plan():
    from optimizer.search.calibrate import env_config_from_trials
    from optimizer.search.recommend import recommend

    cfg = load_config(overrides={"resources": {"gpu_count_min": 1, "gpu_count_max": 1,
                                               "cpu_count_min": 1, "cpu_count_max": 16,
                                               "memory_max": 64.0}})
    trials = _resnet_trials()
    env_config = env_config_from_trials(trials, resources=cfg.resources, preference="cost",
                                        total_samples=1.28e6)
    fit = env_config.workload.fit_report_
    assert fit.n_trials == len(trials)  # every trial, the default-batch ones included
    r = recommend(env_config, cfg, time_budget_s=2.0)
    assert r.allocation.cpus > 1
    # A plan that a measured trial beats on both time and cost (as predicted) is never
    # recommended: the closed loop spends no trial on it and keeps the measured one.
    better = dominating_trial(env_config, r.allocation, trials, cfg, 1.28e6)
    chosen = better.allocation if better is not None else r.allocation
    assert chosen.cpus > 1
    if better is None:
        pred = env_config.workload.predict_trial(r.allocation)
        plan_time = 1.28e6 / pred["throughput"]
        plan_cost = plan_time * _hourly(cfg, r.allocation.cpus, right_size_memory(pred["mem_gb"]))
        for t in trials:
            t_time = 1.28e6 / t.throughput
            t_cost = t_time * _hourly(cfg, t.allocation.cpus, right_size_memory(t.mem_gb_peak))
            assert not (t_time < plan_time and t_cost < plan_cost), t.trial_id


def _hourly(cfg, cpus, memory_gb):
    r = cfg.resources
    return (r.cost_per_gpu_hour + cpus * r.cost_per_cpu_hour + memory_gb * r.cost_per_gb_hour) / 3600


def test_bootstrap_spread_and_expected_improvement_pick_an_unmeasured_allocation():
    cfg = load_config(overrides={"resources": {"gpu_count_max": 0, "cpu_count_max": 4,
                                               "memory_max": 16.0}})
    truth = [(c, b, b / ((0.004 + 0.00005 * b) * (0.2 + 0.8 / c))) for c, b in
             [(1, 64), (2, 64), (4, 64), (2, 256), (4, 256)]]
    trials = [_trial(f"{i:02d}", c, b, thr, total=1e5) for i, (c, b, thr) in enumerate(truth)]
    model = fit_workload_model(trials)
    models = bootstrap_models(measurements_from_trials(trials), model, n=8)
    assert len(models) >= 5
    candidates = [Allocation(0, c, 0.0, b) for c in (1, 2, 3, 4) for b in (64, 128, 256)]
    figs = predicted_figures(models, candidates, cfg, total_samples=1e5)
    samples = objective_samples(figs, cfg, "time", None)
    assert samples.shape == (len(models), len(candidates))
    assert np.ptp(samples, axis=0).max() > 0  # the refits disagree somewhere
    measured = objective_table(trials, cfg, "time")["objective"].min()
    pick = next_probe(samples, candidates, measured, [t.allocation for t in trials],
                      min_gain=0.0)
    assert pick is not None
    assert (pick.allocation.cpus, pick.allocation.batch_size) not in {(c, b) for c, b, _ in truth}
    # Nothing can improve on a best that is already below every prediction.
    assert next_probe(samples, candidates, 0.0, [], min_gain=0.01) is None
    assert math.isfinite(pick.expected_improvement)


def test_improvement_is_judged_against_the_models_own_view_of_the_best_trial():
    """A model that is pessimistic by a common factor (the best trial's probe ran fast) still
    ranks the settings; raw predictions against the measured best would see no improvement
    anywhere and stop before its plan is measured."""
    rng = np.random.default_rng(0)
    # objective (s) per model x candidate: candidate 0 is the measured best, 2 the model's pick
    truth = np.array([10.0, 9.5, 8.0, 12.0])
    samples = 1.3 * truth * np.exp(0.03 * rng.standard_normal((16, 4)))
    cands = [Allocation(0, c, 0.0, 64) for c in (1, 2, 3, 4)]
    best = 10.0  # measured: 30% below the model's prediction for the same setting
    assert next_probe(samples, cands, best, [cands[0]]) is None
    pick = next_probe(anchored(samples, 0, best), cands, best, [cands[0]])
    assert pick is not None and pick.allocation == cands[2]
    assert 0.15 < pick.expected_improvement < 0.25
    # a model no worse than the best trial anywhere still proposes nothing
    flat = 1.3 * np.full((16, 4), 10.0)
    assert next_probe(anchored(flat, 0, best), cands, best, [cands[0]]) is None
    # the model rules out, without a run, the setting no fit expects to beat the best (20% worse)
    assert ruled_out(anchored(samples, 0, best), cands, best, [cands[0]]) == (1, 3)
    assert ruled_out(anchored(flat, 0, best), cands, best, [cands[0]]) == (3, 3)
    # the measured best itself is left at its measurement
    assert np.allclose(anchored(samples, 0, best)[:, 0], best)


@pytest.mark.slow
def test_argparse_script_reaches_trained_agents_in_the_main_job(tmp_path, repo_root):
    import json

    out = tmp_path / "run"
    proc = run_main(
        "--train-file", "tests/data/tiny_argparse_train.py", "--batch-size-arg=--batch-size",
        "--preference", "cost", "--baseline-samples", "4", "--probe-seconds", "0",
        "--agent-seconds", "0.5", "--live-plan", "off", "--refine-rounds", "1",
        "--runoff-rounds", "1", "--output", str(out), "--quiet", cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (out / "main.log").read_text()
    assert "the script's default is 48" in log and "agents trained" in log
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["workload_fit"]["n_trials"] >= 4
    assert rec["allocation"]["batch_size"] is not None
    # The K8s resources set the batch the way the script reads it: its flag, not a variable.
    import yaml

    k8s = yaml.safe_load((out / "k8s-resources.yaml").read_text())
    assert "OPTIMIZER_BATCH_SIZE" not in {e["name"] for e in k8s["env"]}
    assert k8s["args"][-2:] == ["--batch-size", str(rec["allocation"]["batch_size"])]


def test_repeats_of_a_setting_are_judged_by_their_mean():
    from optimizer.foundation.config import OptimizerConfig, ResourceConfig
    from optimizer.search.choice import best_measured, objective_table

    cfg = OptimizerConfig(resources=ResourceConfig(gpu_count_max=0, cpu_count_max=2,
                                                   memory_max=8.0))

    def t(tid, cpus, batch, seconds, peak=1.0):
        return TrialSummary(tid, "completed", Allocation(0, cpus, 4.0, batch),
                            wall_time_s=seconds, throughput=100.0, mem_gb_peak=peak)
    # b256 was lucky once (10 s) and measured again (16 s): its mean, 13 s, loses to b64's 12 s.
    trials = [t("a", 1, 64, 12.0), t("b", 1, 256, 10.0, 1.2), t("confirm-0-b", 1, 256, 16.0, 1.4)]
    table = objective_table(trials, cfg, "time")
    assert len(table) == 2 and table.set_index("trial_id").loc["confirm-0-b", "replicates"] == 2
    assert table.set_index("trial_id").loc["confirm-0-b", "job_time_s"] == pytest.approx(13.0)
    best, row = best_measured(trials, cfg, "time")
    assert best.trial_id == "a" and row["job_time_s"] == 12.0
    # the memory of a repeated setting is sized from the larger of its peaks
    assert table.set_index("trial_id").loc["confirm-0-b", "mem_gb_peak"] == 1.4


def test_batch_size_max_bounds_probes_plans_and_acquisition():
    from envs import CloudEnvironment
    from optimizer.foundation.errors import ConfigError
    from optimizer.search.baseline import plan_baseline
    from optimizer.search.calibrate import env_config_from_trials
    from optimizer.search.expected import batches as _batches

    cfg = load_config(overrides={"resources": {"gpu_count_min": 1, "gpu_count_max": 1,
                                               "cpu_count_min": 1, "cpu_count_max": 16,
                                               "memory_max": 64.0, "batch_size_max": 256}})
    assert cfg.resources.batch_size_max == 256
    probes = plan_baseline(cfg.resources, 8, reference_batch=128)
    assert {a.batch_size for a in probes} - {None} and all(
        a.batch_size is None or a.batch_size <= 256 for a in probes)
    trials = _resnet_trials()  # measured at batch 64 and 256 (and the default)
    measured = {t.allocation.batch_size for t in trials if t.allocation.batch_size}
    # Probes by expected improvement stop at the bound; unbounded they step one power past.
    assert max(_batches(trials)) == 2 * max(measured)
    assert max(_batches(trials, 256)) == 256
    env = env_config_from_trials(trials, resources=cfg.resources, preference="cost",
                                 total_samples=1.28e6)
    plans = list(CloudEnvironment(env).actions.grid.batch_size)
    assert max(plans) <= 256 and min(plans) < min(measured)  # still a step below
    with pytest.raises(ConfigError, match="batch_size_max"):
        load_config(overrides={"resources": {"batch_size_max": 0}})

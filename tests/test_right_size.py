"""Right-sized requests: KRR simple, VPA-style and cloudopt on series whose answer is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optimizer.history import History, HistoryRun, UsageSeries
from optimizer.offline.loglinear import GroupedLogLinear, conformal_quantile
from optimizer.offline.requests import (
    DecayingHistogram,
    backtest,
    cloudopt_request,
    krr_simple,
    right_size,
    sizing_table,
    summarise,
    vpa_style,
)


def run(run_id: str, job: str, cpu, mem, *, stage=(), params=None, started_at=None,
        dt: float = 1.0) -> HistoryRun:
    cpu, mem = np.asarray(cpu, float), np.asarray(mem, float)
    usage = UsageSeries(time_s=np.arange(len(cpu)) * dt, cpu_cores=cpu, mem_gb=mem,
                        stage=tuple(stage))
    return HistoryRun(run_id=run_id, job=job, source="test", started_at=started_at,
                      params=params or {}, usage=usage)


def test_krr_simple_is_the_largest_pod_p95_and_the_peak_plus_15_percent():
    a = run("a", "j", np.linspace(0, 1, 101), np.full(101, 2.0))  # p95 = 0.95
    b = run("b", "j", np.linspace(0, 2, 101), np.r_[np.full(100, 1.0), 3.0])  # p95 = 1.9
    req = krr_simple([a, b])
    assert req.cpu_request == pytest.approx(1.9) and req.cpu_limit is None
    assert req.mem_request_gb == pytest.approx(3.0 * 1.15) == req.mem_limit_gb
    assert req.runs == 2
    short = krr_simple([run("c", "j", [1.0] * 50, [1.0] * 50)])
    assert not short.defined and "50 points < 100" in short.note


def test_krr_keeps_only_its_two_weeks_of_history():
    old = run("old", "j", [4.0] * 100, [8.0] * 100, started_at=0.0)
    new = run("new", "j", [1.0] * 100, [1.0] * 100, started_at=20 * 86400.0)
    assert krr_simple([old, new]).mem_request_gb == pytest.approx(1.15)


def test_decaying_histogram_percentile_is_the_end_of_the_bucket():
    h = DecayingHistogram(0.01)
    h.add(np.array([1.0]), 1.0, np.array([0.0]))
    # Bucket b starts at 0.01 (1.05^b - 1) / 0.05: 1.0 lies in b = 37, which ends at b = 38.
    b = math.floor(math.log(1.0 * 0.05 / 0.01 + 1) / math.log(1.05))
    end = 0.01 * (1.05 ** (b + 1) - 1) / 0.05
    assert h.percentile(0.9) == pytest.approx(end) and 1.0 < end < 1.05


def test_decaying_histogram_forgets_with_a_24_hour_half_life():
    h = DecayingHistogram(0.01)
    h.add(np.array([4.0] * 3), 1.0, np.zeros(3))  # three old samples
    h.add(np.array([1.0]), 1.0, np.array([2 * 86400.0]))  # one, two days later: weight 4
    assert h.percentile(0.5) < 1.1  # the recent sample outweighs the three old ones


def test_vpa_style_target_is_p90_plus_margin_with_its_floors():
    runs = [run(f"r{i}", "j", [1.0] * 10, [0.1] * 10) for i in range(3)]
    req = vpa_style(runs)
    assert 1.15 < req.cpu_request < 1.05 * 1.15 * 1.0 + 0.01
    assert req.mem_request_gb == pytest.approx(250 / 1024)  # 0.1 GiB x 1.15 < 250 MiB floor
    tiny = vpa_style([run("t", "j", [0.001] * 5, [1.0] * 5)])
    assert tiny.cpu_request == pytest.approx(0.025)


def test_vpa_memory_samples_one_peak_per_run_and_day():
    # 19 runs peak at 1 GiB, one at 3 GiB: the p90 of twenty peaks is in the lower bucket,
    # whatever the number of samples of each run.
    runs = [run(f"r{i}", "j", [1.0] * 5, [1.0] * 5) for i in range(19)]
    runs.append(run("big", "j", [1.0] * 500, [3.0] * 500))
    assert vpa_style(runs).mem_request_gb < 1.05 * 1.15
    assert vpa_style(runs[-2:]).mem_request_gb > 3.0 * 1.15


def history_scaling(n_jobs: int = 3, batches=(16, 32, 64, 16, 32, 64), seed: int = 0):
    """Memory = base_j * batch^0.5, CPU p95 = cpus: a known law with 2 % noise."""
    rng = np.random.default_rng(seed)
    runs = []
    for j in range(n_jobs):
        base = 0.05 * (j + 1)
        for i, batch in enumerate(batches):
            cpus = (1, 1, 2, 2, 1, 2)[i % 6]  # not in step with the batch
            mem = base * batch**0.5 * math.exp(0.02 * rng.standard_normal())
            runs.append(run(f"{i:02d}-j{j}", f"job{j}", [cpus] * 20, [mem] * 20,
                            params={"batch_size": batch, "cpus": cpus}))
    return runs


def test_cloudopt_moves_memory_with_the_next_runs_batch_and_cpu_with_its_threads():
    runs = history_scaling()
    req = cloudopt_request(runs, "job1", {"batch_size": 256, "cpus": 4})
    truth_mem = 0.10 * 256**0.5  # 1.6 GiB, four times the batch seen at most
    assert truth_mem <= req.mem_request_gb < 1.5 * truth_mem
    assert 4.0 <= req.cpu_request < 5.0
    assert req.mem_limit_gb >= req.mem_request_gb and req.cpu_limit is None
    krr = krr_simple([r for r in runs if r.job == "job1"], points_required=1)
    assert krr.mem_request_gb < truth_mem  # the past's peak + 15 % falls short
    small = cloudopt_request(runs, "job1", {"batch_size": 16, "cpus": 1})
    assert small.mem_request_gb < 0.75 * krr.mem_request_gb  # and wastes less on a small run


def test_cloudopt_with_one_run_falls_back_to_the_peak_and_scales_cpu_by_threads():
    one = [run("a", "j", [1.0] * 10, [2.0] * 10, params={"cpus": 1})]
    req = cloudopt_request(one, "j", {"cpus": 2})
    assert req.mem_request_gb == pytest.approx(2.3) and req.cpu_request == pytest.approx(2.3)
    assert "too few runs" in req.note
    assert not cloudopt_request(one, "other", {}).defined


def test_stage_requests_appear_where_stages_differ():
    stage = ["load"] * 5 + ["train"] * 15
    runs = [run(f"r{i}", "j", [1.0] * 5 + [2.0] * 15, [0.2] * 5 + [1.0 + 0.01 * i] * 15,
                stage=stage, params={"cpus": 2}) for i in range(6)]
    sized = right_size(History.of(runs), krr_points=1)
    assert len(sized) == 1
    (job,) = sized
    assert [r.strategy for r in job.requests] == ["cloudopt", "krr-simple", "vpa-style"]
    load = [r for r in job.stages if r.stage == "load"]
    assert load and load[0].mem_request_gb < 0.5 * job.requests[0].mem_request_gb
    assert all(r.stage != "train" for r in job.stages)  # train needs what the run needs
    table = sizing_table(sized)
    assert set(table["stage"]) == {"whole run", "load"} and (table["runs"] == 6).all()


def test_backtest_counts_held_and_slack_from_earlier_runs_only():
    runs = history_scaling(batches=(16, 32, 64, 128, 256, 512))
    rows = backtest(History.of(runs), min_prior=2, krr_points=1)
    assert set(rows["strategy"]) == {"cloudopt", "krr-simple", "vpa-style"}
    assert rows["prior_runs"].min() == 2
    table = summarise(rows).set_index("strategy")
    # Every run is bigger than the last: the past's peak never holds, the fitted bound does.
    assert table.loc["krr-simple", "mem_held_%"] == 0
    assert table.loc["cloudopt", "mem_held_%"] >= 90
    held = rows[rows["mem_held"]]
    assert (held["mem_slack"] == (held["mem_request_gb"] - held["mem_used_gb"])
            / held["mem_used_gb"]).all()


def test_conformal_quantile_rank_and_too_few_residuals():
    res = np.arange(1.0, 20.0)  # 19 residuals: the 95 % rank is ceil(20 x 0.95) = 19
    assert conformal_quantile(res, 0.95) == 19.0
    assert conformal_quantile(res[:10], 0.95) == math.inf


def test_conformal_bounds_cover_held_out_runs():
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 3, size=(400, 2))
    groups = np.repeat([f"g{i}" for i in range(8)], 50)
    level = np.repeat(rng.normal(0, 1, 8), 50)
    y = level + x @ np.array([0.7, -0.3]) + 0.1 * rng.standard_normal(400)
    train, test = np.arange(400) % 2 == 0, np.arange(400) % 2 == 1
    model = GroupedLogLinear().fit(x[train], y[train], groups[train])
    calib = y[train] - model.predict(x[train], groups[train])[0]  # in-sample: a bit narrow
    from optimizer.offline.loglinear import held_out_residuals

    held = held_out_residuals(model, x[train], y[train], groups[train])["within"]
    q = conformal_quantile(held, 0.9)
    pred = model.predict(x[test], groups[test])[0]
    coverage = float(np.mean(y[test] <= pred + q))
    assert 0.85 <= coverage <= 0.96
    assert q >= conformal_quantile(calib, 0.9) - 1e-9

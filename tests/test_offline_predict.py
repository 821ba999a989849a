"""Predictions from training logs: scaling model, intervals, preferences, defaults, updates,
SLA history."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig, SLAConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.offline.analyzer import (
    OfflineDataAnalyzer,
    RunPredictor,
    leave_one_out,
    loo_summary,
    predict_start_allocation,
)
from optimizer.offline.evaluation import leave_one_group_out
from optimizer.offline.intervals import JobPredictor
from optimizer.trials.records import TrialSummary

RES = ResourceConfig(gpu_count_max=0, cpu_count_max=4, memory_max=16.0)


def law(params: float, cpus: float, batch: float) -> float:
    """A known scaling law: samples/s ~ cpus^0.6 batch^0.3 / params^0.8."""
    return 5e6 * cpus**0.6 * batch**0.3 / params**0.8


def history(tmp_path, noise: float = 0.0, seed: int = 0, skip=()) -> OfflineDataAnalyzer:
    rng = np.random.default_rng(seed)
    rows = []
    for name, params in (("cnn", 2e4), ("cnn", 8e4), ("mlp", 3e5)):
        for cpus in (1, 2, 4):
            for batch in (32, 128):
                if (name, params, cpus, batch) in skip:
                    continue
                tp = law(params, cpus, batch) * math.exp(noise * rng.standard_normal())
                rows.append({"model": name, "params": params, "cpus": cpus, "batch_size": batch,
                             "memory_gb": 4, "throughput": tp, "total_samples": 1e5,
                             "time_s": 1e5 / tp, "mem_gb_peak": 0.5 + batch / 256})
    path = tmp_path / "hist.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return OfflineDataAnalyzer([path], resources=RES)


def test_default_prediction_on_empty_history_cpu_only():
    a = OfflineDataAnalyzer(resources=RES)
    cheap = a.predict_resources({"model": "new", "params": 1e6, "total_samples": 1e5}, "cost")
    assert cheap.source == "default" and "no training logs" in cheap.notes[0]
    assert cheap.allocation == Allocation(gpus=0, cpus=1, memory_gb=2.0, batch_size=None)
    # 6 x params FLOPs per sample at 2 GFLOP/s per core.
    assert cheap.expected_throughput == pytest.approx(2e9 / 6e6)
    assert cheap.expected_time_s == pytest.approx(1e5 / (2e9 / 6e6))
    assert cheap.uncertainty == pytest.approx(math.log(10))
    fast = a.predict_resources({"model": "new", "params": 1e6}, "time")
    assert fast.allocation.cpus == 4 and math.isnan(fast.expected_time_s)
    assert a.predict_resources({"model": "new"}, "balanced").allocation.cpus == 2


def test_default_prediction_uses_tshirt_sizes_with_gpus():
    res = ResourceConfig(gpu_count_max=2, cpu_count_max=64, memory_max=256.0)
    pred = OfflineDataAnalyzer(resources=res).predict_resources(
        {"model": "resnet50", "params": 25e6}, "time")
    # One V100 learner of the FfDL T-shirt table: 26 cores, 24 GB (no NVML here: V100 row).
    assert pred.allocation.gpus == 1 and pred.allocation.memory_gb == 24.0
    assert pred.allocation.cpus in (4, 8, 26)
    tiny = OfflineDataAnalyzer(resources=res).predict_resources({"params": 5e4}, "time")
    assert tiny.allocation.gpus == 0  # a tiny model stays on the CPU


def test_within_model_scaling_predicts_an_unseen_configuration(tmp_path):
    a = history(tmp_path, skip={("cnn", 2e4, 4, 32)})
    runs = a.combined_data.iloc[:1].copy()
    runs[["cpus", "batch_size"]] = [4, 32]
    pred = a.predict_runs(runs)
    truth = law(2e4, 4, 32)
    assert pred["throughput"].iloc[0] == pytest.approx(truth, rel=0.1)
    # Copying the nearest measured run (cpus 2, or batch 128) would be off by > 30 %.
    assert abs(law(2e4, 2, 32) / truth - 1) > 0.3 and abs(law(2e4, 4, 128) / truth - 1) > 0.3


def test_preference_changes_the_configuration(tmp_path):
    a = history(tmp_path)
    fast = a.predict_resources({"model": "cnn", "params": 2e4, "total_samples": 1e5}, "time")
    cheap = a.predict_resources({"model": "cnn", "params": 2e4, "total_samples": 1e5}, "cost")
    assert fast.source == cheap.source == "history"
    assert fast.allocation.cpus == 4 and fast.allocation.batch_size == 128
    # Throughput grows as cpus^0.6 while the price grows ~linearly: one core is cheapest.
    assert cheap.allocation.cpus == 1
    assert fast.expected_time_s < cheap.expected_time_s
    assert fast.expected_throughput == pytest.approx(law(2e4, 4, 128), rel=0.05)
    lo, hi = fast.throughput_range
    assert lo < fast.expected_throughput < hi
    # Memory: 50 % over the largest peak measured with that batch size (1.0 GB at batch
    # 128), rounded up to the 1 GB memory step.
    assert fast.allocation.memory_gb == 2.0


def test_new_model_of_known_size_uses_similar_models(tmp_path):
    a = history(tmp_path)
    pred = a.predict_resources({"model": "cnn_v2", "params": 4e4, "total_samples": 1e5},
                               "time")
    assert pred.source == "history" and any(m.startswith("cnn") for m in pred.similar_models)
    truth = law(4e4, pred.allocation.cpus, pred.allocation.batch_size)
    assert pred.expected_throughput == pytest.approx(truth, rel=0.35)


def test_unrelated_model_falls_back_to_defaults(shared_data):
    a = OfflineDataAnalyzer([shared_data / "dl-traces" / "executions.csv"], resources=RES)
    pred = a.predict_resources({"model": "resnet", "params": 25e6}, "time")
    assert pred.source == "default" and "no logged model is similar" in pred.notes[0]
    known = a.predict_resources({"model": "cnn_images", "width": 256, "dataset_size": 10000,
                                 "epochs": 3}, "cost")
    assert known.source == "history" and known.similar_models[0].startswith("cnn_images")


def test_update_with_result_changes_the_next_prediction(tmp_path):
    a = history(tmp_path)
    query = {"model": "cnn", "params": 2e4, "total_samples": 1e5}
    before = a.predict_resources(query, "time")
    alloc = before.allocation
    faster = TrialSummary(
        trial_id="new", status="completed", allocation=alloc, wall_time_s=5.0, samples=1e5,
        throughput=3 * before.expected_throughput, total_samples=1e5,
        model_info={"model_name": "cnn", "params": 2e4})
    assert a.update_with_result(faster)
    after = a.predict_resources(query, "time")
    assert after.expected_throughput > 1.3 * before.expected_throughput
    assert len(a.combined_data) == 19
    failed = TrialSummary(trial_id="bad", status="failed", allocation=alloc,
                          model_info={"model_name": "cnn"})
    assert not a.update_with_result(failed)
    assert not a.update_with_result({"foo": 1})
    assert len(a.combined_data) == 19
    # A flat dict with log column names works too.
    assert a.update_with_result({"model": "cnn", "params": 2e4, "cpus": 1, "batch_size": 32,
                                 "time_s": 50, "throughput": 2000})
    assert len(a.combined_data) == 20


def test_update_with_result_on_empty_history_leaves_defaults():
    a = OfflineDataAnalyzer(resources=RES)
    assert a.predict_resources({"model": "cnn", "params": 2e4}).source == "default"
    a.update_with_result({"model_name": "cnn", "params": 2e4, "cpus": 2, "batch_size": 64,
                          "throughput": 900.0, "wall_time_s": 10.0})
    pred = a.predict_resources({"model": "cnn", "params": 2e4})
    assert pred.source == "history" and pred.expected_throughput == pytest.approx(900.0)


def test_best_configurations_per_preference(tmp_path):
    a = history(tmp_path)
    out = a.analyze_all_logs()
    assert out["runs"] == 18 and set(out["models"]["model"]) == {"cnn[20k]", "cnn[80k]",
                                                                  "mlp[300k]"}
    best = out["best"]["cnn[20k]"]
    assert best["time"]["configuration"]["cpus"] == 4
    assert best["time"]["configuration"]["batch_size"] == 128
    # The cost preference (0.7 cost, 0.2 time, 0.1 resource) accepts 9 % more cost per sample
    # for 34 % less time: two cores, not the cheapest one nor the fastest four.
    assert best["cost"]["configuration"]["cpus"] == 2
    assert best["resource"]["configuration"]["cpus"] == 1


def test_sla_history_feeds_forecast_sla_values(tmp_path):
    p = tmp_path / "h.csv"
    pd.DataFrame({"model": ["m"] * 4, "cpus": 1,
                  "started_at": ["2024-01-04", "2024-01-01", "2024-01-03", "2024-01-02"],
                  "time_s": [40.0, 10.0, 30.0, 20.0], "throughput": 100.0}).to_csv(p)
    a = OfflineDataAnalyzer([p], resources=RES)
    h = a.sla_history("m")
    assert list(h.columns) == ["wall_time_s", "cost", "throughput"]
    assert h["wall_time_s"].tolist() == [10.0, 20.0, 30.0, 40.0]  # chronological
    fc = SLAConfig(memory_max=8.0).forecast_sla_values(h)
    assert fc["time"] == pytest.approx(50.0, rel=0.05)  # a trend, not the last value
    assert a.forecast_sla("m")["n_runs"] == 4
    with pytest.raises(CloudoptError, match="no logged run"):
        a.sla_history("other")


def test_leave_one_out_beats_the_global_mean(tmp_path):
    a = history(tmp_path, noise=0.05, seed=1)
    loo = leave_one_out(a.combined_data)
    s = loo_summary(loo)
    assert s["runs"] == 18
    assert s["predictor_throughput_mape"] < 0.5 * s["baseline_throughput_mape"]
    assert s["predictor_time_mape"] < 0.5 * s["baseline_time_mape"]


def test_predict_start_allocation_respects_bounds(tmp_path):
    history(tmp_path)
    res = ResourceConfig(gpu_count_max=0, cpu_count_max=2, memory_max=16.0)
    alloc = predict_start_allocation(tmp_path / "hist.csv",
                                     {"model_name": "cnn", "params": 2e4}, "time", res)
    assert alloc.cpus == 2 and alloc.gpus == 0 and alloc.batch_size == 128


def test_bad_preference_is_a_clear_error(tmp_path):
    a = history(tmp_path)
    with pytest.raises(CloudoptError, match="unknown preference"):
        a.predict_resources({"model": "cnn"}, "fastest")
    with pytest.raises(CloudoptError, match="must be a number"):
        a.predict_resources({"model": "cnn", "params": "big"})


def noisy_runs(seed: int, names=("cnn", "mlp", "gru"), noise: float = 0.1) -> pd.DataFrame:
    """Canonical rows of three models over a grid, throughput by :func:`law` with noise and a
    measured overhead of 2 s + 1 s per doubling of the CPUs (threads start slower); peak
    memory 0.2 + batch / 512 GiB."""
    rng = np.random.default_rng(seed)
    rows = []
    for k, name in enumerate(names):
        params = 2e4 * 4**k
        for cpus in (1, 2, 4):
            for batch in (16, 32, 64, 128):
                tp = law(params, cpus, batch) * math.exp(noise * rng.standard_normal())
                rows.append({"model": name, "params": params, "cpus": cpus, "batch_size": batch,
                             "throughput": tp, "total_samples": 2e4,
                             "time_s": 2 + math.log2(cpus) + 2e4 / tp,
                             "mem_gb_peak": (0.2 + batch / 512) * math.exp(
                                 0.05 * rng.standard_normal())})
    return pd.DataFrame(rows)


def analyzer_of(frame: pd.DataFrame) -> OfflineDataAnalyzer:
    a = OfflineDataAnalyzer(resources=RES)
    a.add_frame(frame, "runs")
    return a


def test_intervals_hold_the_held_out_runs_at_about_their_level():
    train = analyzer_of(noisy_runs(0)).combined_data
    test = analyzer_of(noisy_runs(1)).combined_data  # the same models, fresh noise
    model = JobPredictor(level=0.8).fit(train)
    pred = model.predict(test)
    assert pred["seen"].all()
    for q in ("throughput", "time_s", "mem_gb_peak"):
        held = (pred[f"{q}_low"] <= test[q]) & (test[q] <= pred[f"{q}_high"])
        assert 0.6 <= held.mean() <= 1.0, q
        assert (pred[f"{q}_low"] < pred[q]).all() and (pred[q] < pred[f"{q}_high"]).all()


def test_a_new_model_gets_the_wider_interval_of_models_held_out_whole():
    train = analyzer_of(noisy_runs(0)).combined_data
    query = analyzer_of(noisy_runs(2, names=("cnn", "lstm"))).combined_data
    pred = JobPredictor(level=0.8).fit(train).predict(query)
    seen, new = pred[pred["seen"]], pred[~pred["seen"]]
    assert len(seen) == len(new) == 12
    width = (pred["throughput_high"] / pred["throughput_low"])
    assert width[~pred["seen"]].min() > width[pred["seen"]].max()


def test_measured_overhead_is_fitted_against_the_configuration():
    # Time = 2 s + 1 s per doubling of the CPUs + work / throughput: the median overhead is
    # 3 s for every run; the fit knows a 4-CPU run starts 2 s later than a 1-CPU one.
    data = analyzer_of(noisy_runs(0, noise=0.0)).combined_data
    test = data[(data["cpus"] == 4) & (data["model_name"] == "mlp")]
    pred = RunPredictor().fit(data.drop(index=test.index)).predict(test)
    truth = test["time_s"].to_numpy()
    median_rule = 3.0 + test["work"].to_numpy() / pred["throughput"].to_numpy()
    assert np.allclose(pred["time_s"], truth, rtol=0.03)
    assert np.abs(median_rule - truth).mean() > 3 * np.abs(pred["time_s"] - truth).mean()


def test_leave_one_out_with_intervals_reports_coverage_and_memory():
    data = analyzer_of(noisy_runs(0)).combined_data
    s = loo_summary(leave_one_out(data.iloc[::3], level=0.8))
    assert s["runs"] == 12 and 50 <= s["time_coverage"] <= 100
    assert s["predictor_memory_mape"] < 0.5 * s["baseline_memory_mape"]
    assert s["predictor_time_mape"] < 0.5 * s["baseline_time_mape"]


def test_leave_one_group_out_predicts_each_model_unseen():
    data = analyzer_of(noisy_runs(0)).combined_data
    out = leave_one_group_out(data, level=0.8)
    assert len(out) == len(data) and {"pred_time_s", "time_s_covered"} <= set(out)
    assert 0 <= out["time_s_covered"].mean() <= 1


def test_analyzer_reads_a_traces_folder_with_usage_and_peak_memory(shared_data):
    a = OfflineDataAnalyzer([shared_data / "dl-traces"], resources=RES)
    assert len(a.combined_data) == 60 and (a.combined_data["mem_gb_peak"] > 0).all()
    assert len(a.history) == 60 and all(r.usage is not None for r in a.history)
    pred = a.predict_resources({"model": "cnn_images", "width": 256, "dataset_size": 10000,
                                "epochs": 3}, "cost")
    assert pred.source == "history" and pred.interval_level == 0.8
    lo, hi = pred.peak_memory_range_gb
    assert 0.3 < lo < pred.peak_memory_gb < hi < 1.5
    sized = {s.job: s for s in a.right_size()}
    assert set(sized) == {"autoencoder_stream", "cnn_images", "mlp_tabular", "mlp_workers",
                          "transformer_seq"}
    assert all(r.runs == 12 for s in sized.values() for r in s.requests)

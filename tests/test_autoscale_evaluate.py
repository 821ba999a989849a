"""Autoscaling metrics on hand-computed cases, the evaluation harness and the CLI.

``tests/data/autoscale_dl_slice.csv`` holds the 8 shortest executions of
``../shared/data/dl-traces/traces.csv`` (193 real samples, 0.5 s apart).
"""

import json

import numpy as np
import pytest

from optimizer.cli import main
from phases.evaluation.evaluate import (
    allocation_metrics,
    build_policies,
    count_rescales,
    evaluate_policies,
    kfold_executions,
    load_executions,
    matched_over_allocation,
    relative_features,
    split_executions,
)
from phases.policies import Execution


def test_metrics_on_a_hand_computed_case():
    usage = np.array([[1.0], [2.0], [4.0], [3.0]])
    alloc = np.array([[2.0], [2.0], [2.0], [3.1]])
    m = allocation_metrics(usage, alloc, tolerance=0.05)
    # over: 1 + 0 + 0 + 0.1 = 1.1 of a total use of 10
    assert m["over_allocation_pct"][0] == pytest.approx(11.0)
    # under: only 4 > 2 * 1.05 (3 <= 3.1 and 2 <= 2.1)
    assert m["under_provisioned_pct"][0] == pytest.approx(25.0)
    assert m["shortfall_pct"][0] == pytest.approx(20.0)


def test_tolerance_decides_what_counts_as_under_provisioned():
    usage, alloc = np.array([[1.04], [1.06]]), np.ones((2, 1))
    assert allocation_metrics(usage, alloc, 0.05)["under_provisioned_pct"][0] == 50.0
    assert allocation_metrics(usage, alloc, 0.0)["under_provisioned_pct"][0] == 100.0
    assert allocation_metrics(usage, alloc, 0.1)["under_provisioned_pct"][0] == 0.0


def test_rescales_count_changes_between_cycles():
    plans = [np.array([[1.0, 5.0], [1.0, 6.0], [2.0, 6.0]]), np.array([[3.0, 3.0]])]
    assert count_rescales(plans).tolist() == [1, 1]


def test_matched_over_allocation_scales_down_to_the_target():
    usage = np.arange(1.0, 11.0)
    alloc = np.full(10, 20.0)
    # 10% of samples may exceed alloc * s * 1.05: s * 1.05 just above 9 -> over ~ sum(9 - u)
    oa = matched_over_allocation(usage, alloc, 10.0, tolerance=0.05)
    expected = 100.0 * np.clip(9.0 / 1.05 - usage, 0, None).sum() / usage.sum()
    assert oa == pytest.approx(expected, rel=1e-3)
    assert matched_over_allocation(usage, alloc, 0.0, 0.05) == pytest.approx(
        100.0 * np.clip(10.0 / 1.05 - usage, 0, None).sum() / usage.sum(), rel=1e-3
    )


def test_split_is_by_execution_and_seeded():
    ex = [Execution.from_arrays(f"e{i}", np.arange(5), np.ones(5), 2.0) for i in range(20)]
    train, test = split_executions(ex, 0.25, seed=3)
    assert len(test) == 5 and len(train) == 15
    assert not {e.exec_id for e in train} & {e.exec_id for e in test}
    again = split_executions(list(reversed(ex)), 0.25, seed=3)[1]
    assert sorted(e.exec_id for e in again) == sorted(e.exec_id for e in test)
    assert len(split_executions(ex[:3], 0.1, 0)[1]) == 1  # at least one test execution


def test_relative_features_are_causal():
    e = Execution.from_arrays(
        "x", np.arange(8.0), np.ones(8), 4.0, features=np.r_[np.ones(4), np.full(4, 3.0)][:, None]
    )
    z = relative_features(e, window_s=2.0)[:, 0]
    assert z[:4].tolist() == [1.0] * 4
    assert z[4] == pytest.approx(3.0 / 2.0)  # window (2, 4]: samples 3 and 4 -> mean 2
    assert z[5] == pytest.approx(1.0)


def test_evaluation_on_a_step_scores_oracle_and_reactive():
    step = np.r_[np.ones(30), np.full(30, 3.0)]
    e = Execution.from_arrays("s", np.arange(60.0), step, 10.0, ("cpu",))
    result = evaluate_policies(
        build_policies(["oracle-max", "oracle-rules", "reactive-max", "reactive-rules"]), [e], [e]
    )
    assert result.metrics["oracle-max"]["cpu"]["over_allocation_pct"] == 0.0
    assert result.metrics["oracle-max"]["cpu"]["under_provisioned_pct"] == 0.0
    reactive = result.metrics["reactive-max"]["cpu"]
    # cold start 4 on the first cycle (30 over), then 1 during the first step cycle (20 short)
    assert reactive["over_allocation_pct"] == pytest.approx(100 * 30 / 120)
    assert reactive["under_provisioned_pct"] == pytest.approx(100 * 10 / 60)
    assert reactive["shortfall_pct"] == pytest.approx(100 * 20 / 120)
    assert reactive["rescales"] == 2
    assert reactive["steady_over_allocation_pct"] == pytest.approx(0.0)


@pytest.fixture()
def slice_csv(repo_root):
    return repo_root / "tests" / "data" / "autoscale_dl_slice.csv"


def test_load_executions_reads_resources_and_features(slice_csv):
    ex = load_executions(
        slice_csv, "exec_id", ["cpu_cores"], resources=["mem_gb"], time="time_s", cycle_s=5.0
    )
    assert len(ex) == 8
    assert ex[0].resources == ("mem_gb",) and ex[0].features.shape[1] == 1
    assert all(np.all(np.diff(e.cycle) >= 0) and e.cycle[0] == 0 for e in ex)


def test_cli_evaluate_writes_metrics_report_and_plots(slice_csv, tmp_path):
    out = tmp_path / "eval"
    argv = [
        "autoscale",
        "evaluate",
        "--traces",
        str(slice_csv),
        "--exec-id",
        "exec_id",
        "--features",
        "cpu_cores,mem_gb",
        "--time",
        "time_s",
        "--cycle",
        "5",
        "--test-fraction",
        "0.25",
        "--seed",
        "1",
        "--epochs",
        "3",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 0
    policies = json.loads((out / "metrics.json").read_text())
    settings = json.loads((out / "settings.json").read_text())
    for name in (
        "oracle-max",
        "oracle-rules",
        "reactive-max",
        "reactive-rules",
        "phase-rules",
        "phase-proactive",
        "vpa",
        "static-peak",
    ):
        for r in ("cpu_cores", "mem_gb"):
            assert set(policies[name][r]) >= {
                "over_allocation_pct",
                "under_provisioned_pct",
                "shortfall_pct",
                "rescales",
            }
    assert policies["oracle-max"]["cpu_cores"]["under_provisioned_pct"] == 0.0
    assert policies["static-peak"]["mem_gb"]["rescales"] == 0
    assert len(settings["test_ids"]) == 2
    for f in ("metrics.csv", "report.md", "allocation.png", "policies.png"):
        assert (out / f).stat().st_size > 0
    assert "| reactive-rules |" in (out / "report.md").read_text()


def test_cli_names_a_missing_column(slice_csv, tmp_path, capsys):
    argv = [
        "autoscale",
        "evaluate",
        "--traces",
        str(slice_csv),
        "--exec-id",
        "exec_id",
        "--features",
        "cpu,mem_gb",
        "--out",
        str(tmp_path / "x"),
        "--quiet",
    ]
    assert main(argv) == 2
    assert "'cpu'" in capsys.readouterr().err


def test_kfold_tests_every_execution_once():
    ex = [Execution.from_arrays(f"e{i}", np.arange(5), np.ones(5), 2.0) for i in range(7)]
    folds = kfold_executions(ex, 3, seed=0)
    tested = [e.exec_id for _, test in folds for e in test]
    assert sorted(tested) == sorted(e.exec_id for e in ex)
    for train, test in folds:
        assert not {e.exec_id for e in train} & {e.exec_id for e in test}
        assert len(train) + len(test) == 7


def test_cli_evaluates_with_a_saved_phase_model(slice_csv, repo_root, tmp_path):
    model = repo_root / "phases" / "models" / "default"
    if not (model / "meta.json").is_file():
        pytest.skip("no shipped phase model")
    out = tmp_path / "m"
    argv = [
        "autoscale",
        "evaluate",
        "--traces",
        str(slice_csv),
        "--exec-id",
        "exec_id",
        "--features",
        "cpu_cores,mem_gb",
        "--time",
        "time_s",
        "--cycle",
        "5",
        "--folds",
        "2",
        "--model",
        str(model),
        "--policies",
        "reactive-rules,phase-rules,phase-proactive",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 0
    policies = json.loads((out / "metrics.json").read_text())
    settings = json.loads((out / "settings.json").read_text())
    assert "loaded from" in settings["phase_model"]
    assert len(settings["test_ids"]) == 8  # every execution tested once
    assert policies["phase-rules"]["mem_gb"]["over_allocation_pct"] >= 0


def test_cli_leaves_one_group_out(slice_csv, tmp_path):
    import pandas as pd

    frame = pd.read_csv(slice_csv)
    groups = {e: f"w{i % 3}" for i, e in enumerate(sorted(frame["exec_id"].unique()))}
    frame["workload"] = frame["exec_id"].map(groups)
    traces = tmp_path / "grouped.csv"
    frame.to_csv(traces, index=False)
    out = tmp_path / "lowo"
    argv = ["autoscale", "evaluate", "--traces", str(traces), "--exec-id", "exec_id",
            "--features", "cpu_cores,mem_gb", "--time", "time_s", "--cycle", "5",
            "--group", "workload", "--epochs", "3", "--policies",
            "reactive-rules,phase-adaptive", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    settings = json.loads((out / "settings.json").read_text())
    assert settings["group"] == "workload" and settings["groups"] == groups
    # every execution is tested once, by a fold that fitted on the other workloads only
    assert sorted(settings["test_ids"]) == sorted(groups)
    assert main([*argv[:-3], "--group", "no_such_column", "--out", str(tmp_path / "x"),
                 "--quiet"]) == 2
    # a cold start from each job's previous run: every workload's runs after its first have one
    prev = tmp_path / "prev"
    assert main([*argv[:-3], "--cold-start", "previous-run", "--out", str(prev), "--quiet"]) == 0
    settings = json.loads((prev / "settings.json").read_text())
    assert settings["cold_start"] == "previous-run"
    assert settings["with_previous_run"] == len(groups) - len(set(groups.values()))
    assert "previous run" in (prev / "report.md").read_text()
    plain = json.loads((out / "metrics.json").read_text())["reactive-rules"]["cpu_cores"]
    warm = json.loads((prev / "metrics.json").read_text())["reactive-rules"]["cpu_cores"]
    assert warm["over_allocation_pct"] != plain["over_allocation_pct"]  # the first cycles moved


def test_previous_run_cold_start_without_a_job_column_is_one_clear_error(slice_csv):
    from optimizer.foundation.errors import CloudoptError
    from phases.evaluation.evaluate import evaluate_file

    with pytest.raises(CloudoptError, match="needs the column naming each execution's job"):
        evaluate_file(slice_csv, "exec_id", ["cpu_cores", "mem_gb"], time="time_s",
                      cycle_s=5.0, policies=["reactive-rules"], cold_start="previous-run")
    with pytest.raises(CloudoptError, match="cannot read group column 'no_such'"):
        evaluate_file(slice_csv, "exec_id", ["cpu_cores", "mem_gb"], time="time_s",
                      cycle_s=5.0, policies=["reactive-rules"], cold_start="previous-run",
                      job="no_such")

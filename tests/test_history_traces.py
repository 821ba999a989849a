"""Readers of run history: the shared trace sets and CSV logs into HistoryRun records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optimizer.foundation.errors import TraceFormatError
from optimizer.history.csv_logs import read_csv_history
from optimizer.history.traces import read_trace_history

REPO = Path(__file__).resolve().parents[1]


def test_dl_traces_are_sixty_runs_of_five_workloads_in_exec_order(shared_data):
    h = read_trace_history(shared_data / "dl-traces")
    assert len(h) == 60 and len(h.jobs()) == 5
    assert [r.run_id for r in h] == sorted(r.run_id for r in h)  # no timestamps: exec_id order
    first = h.runs[0]
    assert first.run_id == "d000" and first.job == "mlp_tabular" and first.started_at is None
    assert first.params == {"dataset_size": 120000, "epochs": 4, "batch_size": 256,
                            "width": 256, "cpus": 1}
    # executions.csv's `samples` counts monitor samples (29); the job's are n x epochs.
    assert first.outcome["samples"] == 480000
    assert first.outcome["throughput"] == pytest.approx(480000 / 15.1)
    assert len(first.usage) == 29 and first.usage.stage[0] == "load"
    assert sum(len(r.usage) for r in h) + sum(int(r.tags["exit_samples_dropped"]) for r in h) \
        == 5050


def test_dl_traces_drop_the_exit_samples_and_keep_stage_labels(shared_data):
    h = read_trace_history(shared_data / "dl-traces")
    dropped = [r for r in h if r.tags["exit_samples_dropped"] != "0"]
    assert len(dropped) == 5  # the README's five executions whose last sample reads 0 GiB
    for r in h:
        assert np.all(r.usage.mem_gb[-1:] > 0)
        assert set(r.usage.stage) <= {"start", "load", "tokenize", "train", "eval",
                                      "checkpoint", "done"}
    peak = {r.run_id: r.value("peak_mem_gb") for r in h}
    assert peak["d027"] == pytest.approx(1.8069)


def test_ai4dl_pods_are_runs_of_their_service(shared_data):
    h = read_trace_history(shared_data / "ai4dl")
    assert sorted(r.run_id for r in h) == ["service1/exec1", "service1/exec2", "service1/exec3",
                                           "service1/exec4", "service2/exec2"]
    vr = next(r for r in h if r.job == "service2")
    # sample-vr.csv: a data row has one more field than the header; still 2,286 samples.
    assert len(vr.usage) == 2286 and vr.params["cpus"] == 16
    assert vr.usage.hours == pytest.approx((1566421580 - 1566384070) / 3600)
    assert 10 < vr.value("peak_mem_gb") < 18  # GiB from bytes, under its 18 GiB limit
    starts = [r.started_at for r in h]
    assert starts == sorted(starts)


def test_a_traces_table_missing_columns_names_the_file_and_columns(tmp_path):
    pd.DataFrame({"exec_id": ["a"], "time_s": [0.5], "cpu_cores": [1.0]}).to_csv(
        tmp_path / "traces.csv", index=False)
    with pytest.raises(TraceFormatError, match=r"traces\.csv: missing column\(s\) mem_gb"):
        read_trace_history(tmp_path)


def test_a_non_number_in_usage_names_the_file_column_and_line(tmp_path):
    pd.DataFrame({"exec_id": ["a", "a"], "time_s": [0.5, 1.0], "cpu_cores": [1.0, "busy"],
                  "mem_gb": [0.2, 0.3]}).to_csv(tmp_path / "traces.csv", index=False)
    with pytest.raises(TraceFormatError, match=r"cpu_cores has a non-number 'busy' on line 3"):
        read_trace_history(tmp_path / "traces.csv")


def test_a_folder_without_trace_tables_says_so(tmp_path):
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "other.csv", index=False)
    with pytest.raises(TraceFormatError, match="no trace table"):
        read_trace_history(tmp_path)


def test_csv_history_from_the_shipped_logs():
    h = read_csv_history(REPO / "examples" / "logs")
    assert len(h) == 48 and h.jobs() == ["cnn", "mlp", "transformer"]
    run = next(r for r in h if r.run_id == "016-cnn-8-e2-g0-c1-m4-b32")
    assert run.params["batch_size"] == 32 and run.params["params"] == 6330
    assert run.outcome["wall_s"] == pytest.approx(3.775)
    assert run.outcome["peak_mem_gb"] == pytest.approx(0.3477)
    assert run.started_at is not None and run.tags["model_key"] == "cnn[6.33k]"


def test_csv_history_missing_columns_names_the_file_and_columns(tmp_path):
    path = tmp_path / "runs.csv"
    pd.DataFrame({"model": ["cnn"], "batch_size": [32]}).to_csv(path, index=False)
    with pytest.raises(TraceFormatError, match=r"runs\.csv: not a training log: missing "
                                               r"outcome \(one of: wall_time_s"):
        read_csv_history(path)

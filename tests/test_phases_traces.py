"""Trace reading: sorting, NaN and exit-sample rules, short executions, bad columns, AI4DL files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optimizer.foundation.errors import ModelFileError, TraceFormatError
from phases.traces import FeatureScaler, read_traces

DATA = Path(__file__).resolve().parent / "data"


def write(tmp_path: Path, frame: pd.DataFrame, name: str = "t.csv") -> Path:
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def test_sorted_by_time_with_original_rows(tmp_path):
    frame = pd.DataFrame(
        {
            "id": ["b", "a", "b", "a", "b"],
            "t": [3, 2, 1, 1, 2],
            "cpu": [30.0, 20, 10, 10, 20],
            "mem": [3.0, 2, 1, 1, 2],
        }
    )
    ts = read_traces(write(tmp_path, frame), "id", ["cpu", "mem"], "t")
    assert ts.exec_ids == ["b", "a"]  # order of first appearance in the file
    np.testing.assert_array_equal(ts.arrays[0][:, 0], [10, 20, 30])
    np.testing.assert_array_equal(ts.rows[0], [2, 4, 0])
    np.testing.assert_array_equal(ts.times[1], [1, 2])
    assert ts.features == ["cpu", "mem"] and ts.n_rows == 5


def _with_bad_values(tmp_path):
    frame = pd.DataFrame(
        {
            "id": ["a"] * 5,
            "t": range(5),
            "cpu": [np.nan, 1.0, np.inf, 3.0, 4.0],
            "mem": ["x", 1, 2, 3, 4],
        }
    )
    return write(tmp_path, frame)


def test_invalid_values_refused_with_column_and_line(tmp_path):
    path = _with_bad_values(tmp_path)
    with pytest.raises(TraceFormatError) as err:
        read_traces(path, "id", ["cpu", "mem"], "t")
    msg = str(err.value)
    assert msg.startswith(f"{path}: 3 invalid value(s) (not a finite number) in 2 row(s)")
    # data row 0 is line 2 of the file (the header is line 1)
    assert "column 'cpu' line 2" in msg and "column 'mem' line 2 ('x')" in msg
    assert "column 'cpu' line 4 (inf)" in msg and "--drop-invalid" in msg


def test_invalid_rows_dropped_on_request_never_filled(tmp_path):
    path = _with_bad_values(tmp_path)
    with pytest.warns(UserWarning, match="3 invalid value.*those rows are dropped"):
        ts = read_traces(path, "id", ["cpu", "mem"], "t", invalid="drop")
    np.testing.assert_array_equal(ts.arrays[0][:, 0], [1, 3, 4])
    np.testing.assert_array_equal(ts.rows[0], [1, 3, 4])  # original row numbers kept


def test_short_execution_skipped_with_warning(tmp_path):
    frame = pd.DataFrame(
        {"id": ["a"] * 6 + ["b"] * 3, "cpu": np.arange(9.0) + 1, "mem": np.ones(9)}
    )
    with pytest.warns(UserWarning, match=r"shorter than 4 samples skipped: b \(3\)"):
        ts = read_traces(write(tmp_path, frame), "id", ["cpu", "mem"], min_length=4)
    assert ts.exec_ids == ["a"]
    with pytest.warns(UserWarning), pytest.raises(TraceFormatError, match="no execution"):
        read_traces(write(tmp_path, frame), "id", ["cpu", "mem"], min_length=10)


def test_trailing_zero_memory_sample_dropped(tmp_path):
    frame = pd.DataFrame(
        {"id": ["a"] * 5, "cpu": [1.0, 1, 1, 1, 0.5], "mem": [0.5, 0.6, 0.6, 0.6, 0.0]}
    )
    path = write(tmp_path, frame)
    assert len(read_traces(path, "id", ["cpu", "mem"])[0]) == 4
    assert len(read_traces(path, "id", ["cpu", "mem"], drop_exit_samples=False)[0]) == 5


def test_missing_column_names_file_column_and_available(tmp_path):
    frame = pd.DataFrame({"id": ["a"], "cpu": [1.0]})
    path = write(tmp_path, frame, "trace.csv")
    with pytest.raises(TraceFormatError) as err:
        read_traces(path, "id", ["cpu", "memory"])
    msg = str(err.value)
    assert "trace.csv" in msg and "'memory'" in msg and "available columns: id, cpu" in msg
    with pytest.raises(TraceFormatError, match="not found"):
        read_traces(tmp_path / "nope.csv", "id", ["cpu"])


def test_ai4dl_vr_file_with_unnamed_index_column():
    features = ["cpu.usage", "cpu.usage.cores", "mem.current", "mem.working.set"]
    ts = read_traces(DATA / "phases_vr_slice.csv", "pod.id", features, "timestamp")
    assert ts.exec_ids == ["exec2"] and ts.arrays[0].shape == (30, 4)
    assert ts.arrays[0][0, 0] == 26388206571  # the field after the unnamed index
    assert np.all(np.diff(ts.times[0]) > 0)


def test_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"id": ["a"] * 4, "cpu": [1.0, 2, 3, 4], "mem": [1.0] * 4})
    frame.to_parquet(tmp_path / "t.parquet")
    ts = read_traces(tmp_path / "t.parquet", "id", ["cpu", "mem"])
    np.testing.assert_array_equal(ts.arrays[0][:, 0], [1, 2, 3, 4])


def test_scaler_json_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.normal(5, 2, size=(20, 3)), rng.normal(5, 2, size=(7, 3))]
    scaler = FeatureScaler(["a", "b", "c"]).fit(arrays)
    scaler.to_json(tmp_path / "s.json")
    loaded = FeatureScaler.from_json(tmp_path / "s.json")
    np.testing.assert_allclose(loaded.transform(arrays)[1], scaler.transform(arrays)[1])
    assert loaded.features == ["a", "b", "c"]
    z = np.concatenate(loaded.transform(arrays))
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-12)
    (tmp_path / "bad.json").write_text('{"mean": [1], "scale": [0], "var": [1]}')
    with pytest.raises(ModelFileError):
        FeatureScaler.from_json(tmp_path / "bad.json")


def test_datetime_time_column(tmp_path):
    frame = pd.DataFrame(
        {
            "id": ["a"] * 3,
            "t": ["2024-01-01T00:00:10", "2024-01-01T00:00:00", "bad"],
            "cpu": [2.0, 1.0, 3.0],
        }
    )
    ts = read_traces(write(tmp_path, frame), "id", ["cpu"], "t")
    np.testing.assert_array_equal(ts.arrays[0][:, 0], [1.0, 2.0])  # sorted; bad time dropped
    assert ts.times[0][1] - ts.times[0][0] == 10.0

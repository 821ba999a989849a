"""Reading training logs: column aliases, rejection messages, dropped rows, fuzzing."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import CloudoptError, TraceFormatError
from optimizer.offline.analyzer import (
    OfflineDataAnalyzer,
    discover_logs,
    match_columns,
    normalise_frame,
    normalise_name,
    read_csv_table,
)

RES = ResourceConfig(gpu_count_max=0, cpu_count_max=4, memory_max=16.0)


def write(tmp_path, text, name="log.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_header_normalisation_and_aliases():
    assert normalise_name("Time (s)") == "time_s"
    assert normalise_name(" allocation.gpus ") == "gpus"
    assert normalise_name("Throughput (samples/s)") == "throughput_samples_s"
    found = match_columns(["Model", "# Params", "Threads", "Batch", "Wall_s",
                           "samples/s", "Memory (GB)", "Cost USD", "Dataset"])
    assert found == {"model_name": "Model", "params": "# Params", "cpus": "Threads",
                     "batch_size": "Batch", "time_s": "Wall_s", "throughput": "samples/s",
                     "memory_gb": "Memory (GB)", "cost": "Cost USD", "dataset": "Dataset"}


def test_plain_csv_with_aliases_is_read(tmp_path):
    p = write(tmp_path, "Model,Parameters,Layers,Dataset,Batch Size,GPUs,CPUs,Memory (GB),"
                        "Training Time,Samples/s,Total Cost,CPU Util\n"
                        "resnet,25000000,50,imagenet,64,1,8,24,3600,200,3.1,80\n"
                        "resnet,25000000,50,imagenet,128,2,16,48,2000,380,3.6,75\n")
    a = OfflineDataAnalyzer([p], resources=RES)
    d = a.combined_data
    assert list(d["model_name"]) == ["resnet", "resnet"]
    assert list(d["gpus"]) == [1, 2] and list(d["cpus"]) == [8, 16]
    assert list(d["time_s"]) == [3600, 2000] and list(d["throughput"]) == [200, 380]
    assert d["cost"].tolist() == [3.1, 3.6] and d["cpu_util"].tolist() == [80, 75]
    assert a.model_characteristics["resnet[25M]"]["layers"] == 50


def test_tool_trial_records_are_read(tmp_path):
    # The columns records.summaries_to_frame writes (runs/<run>/trials.csv).
    p = write(tmp_path, "trial_id,status,gpus,cpus,memory_gb,batch_size,wall_time_s,samples,"
                        "throughput,throughput_source,hourly_cost,cost,total_samples,"
                        "predicted_total_time_s,mem_gb_peak,train_file,model_name,"
                        "model_family,params,layers,dataset\n"
                        "t0,completed,0,1,4,64,10,1000,120,metrics_csv,0.05,0.0001,1000,10,0.4,"
                        "examples/train_cnn.py,cnn,CNN,6330,4,synthetic\n"
                        "t1,probe,0,2,4,64,5,400,150,metrics_csv,0.08,0.0001,2000,14,0.4,"
                        "examples/train_cnn.py,cnn,CNN,6330,4,synthetic\n"
                        "t2,failed,0,2,0.5,64,1,,,none,0.08,0,,,0.5,"
                        "examples/train_cnn.py,cnn,CNN,6330,4,synthetic\n", "trials.csv")
    a = OfflineDataAnalyzer(resources=RES)
    rep = a.add_log(p)
    assert rep.rows_read == 3 and rep.rows_kept == 2 and rep.dropped == {"failed trial": 1}
    d = a.combined_data
    # A probe's job time is the runner's extrapolation, its work the whole job's.
    assert d["time_s"].tolist() == [10, 14]
    assert d["work"].tolist() == [1000, 2000]
    # A probe's logged cost is the probe's; the job's cost comes from its hourly cost.
    assert d["cost"].iloc[1] == pytest.approx(0.08 * 14 / 3600)


def test_dl_traces_executions_derive_work_and_throughput(shared_data):
    a = OfflineDataAnalyzer([shared_data / "dl-traces" / "executions.csv"], resources=RES)
    d = a.combined_data
    assert len(d) == 60
    row = d.iloc[0]  # d000: mlp_tabular n=120000, 4 epochs, 15.1 s
    assert row["work"] == 480000
    assert row["throughput"] == pytest.approx(480000 / 15.1)
    assert row["cpus"] == 1 and row["batch_size"] == 256


@pytest.mark.parametrize("text, missing", [
    ("model,batch\ncnn,32\n", ["outcome", "time_s"]),
    ("time_s,cpus\n10,1\n", ["model", "model_name"]),
    ("model,throughput\ncnn,100\n", ["configuration", "gpus", "cpus", "batch_size"]),
    ("foo,bar\n1,2\n", ["model", "outcome", "configuration"]),
])
def test_rejection_names_file_and_missing_columns(tmp_path, text, missing):
    p = write(tmp_path, text, "bad.csv")
    with pytest.raises(TraceFormatError) as err:
        OfflineDataAnalyzer(resources=RES).add_log(p)
    msg = str(err.value)
    assert str(p) in msg and "missing" in msg
    for word in missing:
        assert word in msg


@pytest.mark.parametrize("text, fragment", [
    ("", "empty file"),
    ('model,time\n"cnn,1\n', "not a readable CSV"),
    ("a,b\n1,2\n1,2,3,4\n", "not a readable CSV"),
])
def test_unreadable_files_are_clear_errors(tmp_path, text, fragment):
    p = write(tmp_path, text, "broken.csv")
    with pytest.raises(TraceFormatError, match=fragment):
        read_csv_table(p)


def test_missing_file_and_binary_file(tmp_path):
    with pytest.raises(TraceFormatError, match="not found"):
        OfflineDataAnalyzer(resources=RES).add_log(tmp_path / "nope.csv")
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00\x01model\n\x80\x81")
    with pytest.raises(TraceFormatError, match=str(p)):
        OfflineDataAnalyzer(resources=RES).add_log(p)


def test_impossible_rows_are_dropped_and_counted(tmp_path):
    p = write(tmp_path, "model,cpus,batch,time_s,throughput\n"
                        "cnn,1,32,10,100\n"
                        "cnn,1,32,-5,100\n"      # negative time
                        "cnn,1,32,10,0\n"        # zero throughput
                        "cnn,0,32,10,100\n"      # no CPU
                        "cnn,1,32,,\n"           # no outcome
                        ",1,32,10,100\n"         # no model
                        "cnn,2,64,inf,100\n"     # infinite time
                        "cnn,2,64,abc,200\n")    # unparsable time, throughput kept
    a = OfflineDataAnalyzer(resources=RES)
    rep = a.add_log(p)
    assert rep.rows_read == 8 and rep.rows_kept == 2 and rep.rows_dropped == 6
    assert rep.dropped["time <= 0 or not finite"] == 2
    assert rep.dropped["throughput <= 0 or not finite"] == 1
    assert rep.dropped["CPUs < 1"] == 1
    assert rep.dropped["no time and no throughput"] == 1
    assert rep.dropped["no model name or size"] == 1
    assert a.analyze_all_logs()["rows_dropped"] == rep.dropped


def test_discover_logs_directory_and_glob(tmp_path):
    write(tmp_path, "model,cpus,time_s\ncnn,1,10\n", "a.csv")
    (tmp_path / "run1" / "trials" / "t0").mkdir(parents=True)
    write(tmp_path / "run1", "model,cpus,time_s\ncnn,2,7\n", "trials.csv")
    write(tmp_path / "run1" / "trials" / "t0", "exec_id,time_s,cpu_cores,mem_gb\n", "trace.csv")
    found = discover_logs(tmp_path)
    assert [p.name for p in found] == ["a.csv", "trials.csv"]
    assert discover_logs(str(tmp_path / "*.csv")) == [tmp_path / "a.csv"]
    with pytest.raises(CloudoptError, match="no log file"):
        discover_logs(str(tmp_path / "missing*.csv"))


def test_add_logs_skips_unusable_files_but_fails_when_none_is_usable(tmp_path):
    write(tmp_path, "model,cpus,time_s\ncnn,1,10\n", "good.csv")
    write(tmp_path, "foo,bar\n1,2\n", "other.csv")
    a = OfflineDataAnalyzer(resources=RES)
    a.add_logs(tmp_path)
    assert len(a.combined_data) == 1
    assert list(a.rejected) == [str(tmp_path / "other.csv")]
    assert "missing" in a.rejected[str(tmp_path / "other.csv")]
    with pytest.raises(TraceFormatError, match="other.csv"):
        OfflineDataAnalyzer(resources=RES).add_logs(tmp_path, strict=True)
    with pytest.raises(TraceFormatError, match="no usable training log"):
        OfflineDataAnalyzer(resources=RES).add_logs(tmp_path / "other.csv")


HEADER_WORDS = ["model", "params", "cpus", "threads", "gpus", "batch", "time_s", "wall_s",
                "throughput", "cost", "status", "memory_gb", "dataset", "x", "", "Time (s)"]
CELL = st.one_of(st.text(max_size=6), st.integers(-5, 10**6).map(str),
                 st.floats(allow_nan=True, allow_infinity=True).map(repr),
                 st.sampled_from(["", "nan", "inf", "-1", "0", "failed", "probe", "cnn"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=st.lists(st.sampled_from(HEADER_WORDS), min_size=0, max_size=7),
       rows=st.lists(st.lists(CELL, min_size=0, max_size=8), max_size=6),
       sep=st.sampled_from([",", ";"]))
def test_fuzzed_csv_is_read_or_rejected_clearly(header, rows, sep):
    text = sep.join(header) + "\n" + "\n".join(sep.join(r) for r in rows)
    try:
        raw = pd.read_csv(io.StringIO(text), dtype=str) if text.strip() else None
    except Exception:  # noqa: BLE001 - pandas' own view; our reader must still be clean
        raw = None
    path = "fuzz.csv"
    try:
        if raw is None:
            raise TraceFormatError(f"{path}: unreadable")
        frame, report = normalise_frame(raw, path)
    except CloudoptError as exc:
        assert path in str(exc)
        return
    assert report.rows_kept == len(frame) <= report.rows_read
    assert report.rows_kept + report.rows_dropped == report.rows_read
    if len(frame):
        ok_time = frame["time_s"].isna() | (frame["time_s"] > 0)
        ok_tp = frame["throughput"].isna() | (frame["throughput"] > 0)
        assert ok_time.all() and ok_tp.all()
        assert np.isfinite(frame[["time_s", "throughput"]].fillna(1).to_numpy()).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_fuzzed_bytes_through_add_log(tmp_path, data):
    p = tmp_path / "f.csv"
    p.write_bytes(data)
    a = OfflineDataAnalyzer(resources=RES)
    try:
        a.add_log(p)
    except CloudoptError as exc:
        assert str(p) in str(exc)

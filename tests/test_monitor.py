"""CSVMonitor following a growing metrics file, and ProcessMonitor sampling a process tree."""

import subprocess
import sys
import time

import pandas as pd
import pytest

from optimizer.foundation.errors import TraceFormatError
from optimizer.trials.monitor import (
    TRACE_COLUMNS,
    CSVMonitor,
    ProcessMonitor,
    kill_tree,
    read_trace,
)


def test_csv_monitor_follows_appended_rows(tmp_path):
    p = tmp_path / "m.csv"
    mon = CSVMonitor(p)
    assert mon.check_for_updates() is False  # no file yet
    assert mon.get_new_rows().empty
    p.write_text("step,epoch,samples,loss\n1,1,10,0.9\n2,1,20,0.8\n")
    assert mon.check_for_updates() is True
    assert mon.check_for_updates() is False
    first = mon.get_new_rows()
    assert list(first["step"]) == [1, 2]
    with open(p, "a") as fh:
        fh.write("3,1,30,0.7\n4,2,4")  # the last line is still being written
    assert mon.check_for_updates() is True
    new = mon.get_new_rows()
    assert list(new["samples"]) == [30]
    with open(p, "a") as fh:
        fh.write("0,0.6\n")
    assert list(mon.get_new_rows()["samples"]) == [40]
    assert len(mon.load_latest_data()) == 4


def test_update_interval_throttles_checks(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("step,samples\n1,1\n")
    mon = CSVMonitor(p, update_interval=60)
    assert mon.check_for_updates() is True
    p.write_text("step,samples\n1,1\n2,2\n")
    assert mon.check_for_updates() is False  # too soon to look again


def test_rl_metrics_extend_the_training_csv(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("step,samples,loss\n1,10,0.9\n2,20,0.8\n3,30,0.7\n")
    mon = CSVMonitor(p)
    row = mon.append_rl_metrics({"policy": "cost", "action": 4, "reward": 0.5,
                                 "sla_compliance": 1.0})
    assert row["step"] == 3  # aligned with the last training row
    mon.append_rl_metrics({"step": 1, "policy": "time", "reward": -0.25, "extra": "x"})
    out = mon.create_extended_csv(tmp_path / "ext.csv")
    back = pd.read_csv(tmp_path / "ext.csv")
    assert len(out) == len(back) == 3
    assert back.loc[back["step"] == 1, "policy"].item() == "time"
    assert back.loc[back["step"] == 3, "reward"].item() == 0.5
    assert pd.isna(back.loc[back["step"] == 2, "reward"].item())
    assert "extra" in back.columns and "loss" in back.columns


def test_unreadable_metrics_csv_is_a_clear_error(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text('a,b\n1,"unterminated\n')
    with pytest.raises(TraceFormatError, match="m.csv"):
        CSVMonitor(p).load_latest_data()


def test_process_monitor_samples_the_whole_tree(tmp_path):
    # A parent that sleeps and a child that spins: CPU is summed over the tree.
    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
            "time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    trace = tmp_path / "trace.csv"
    mon = ProcessMonitor(proc.pid, trace, exec_id="e1", interval=0.2)
    mon.start()
    try:
        time.sleep(1.5)
    finally:
        kill_tree(proc.pid, grace_s=1, popen=proc)
        mon.stop()
    df = read_trace(trace)
    assert list(df.columns) == TRACE_COLUMNS
    assert (df["exec_id"] == "e1").all()
    assert df["time_s"].is_monotonic_increasing
    # The spinning child is seen (the parent sleeps); a loaded machine may give it little CPU.
    assert df["cpu_cores"].iloc[-3:].mean() > 0.05
    assert (df["mem_gb"] > 0.005).all()
    assert mon.stats()["n_samples_trace"] == len(df) and not mon.oom


def test_trace_columns_match_the_shared_traces(shared_data):
    header = (shared_data / "dl-traces" / "traces.csv").open().readline().strip().split(",")
    assert all(c in header for c in TRACE_COLUMNS)


def test_read_trace_names_missing_columns(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("exec_id,time_s\na,1\n")
    with pytest.raises(TraceFormatError, match="cpu_cores"):
        read_trace(p)

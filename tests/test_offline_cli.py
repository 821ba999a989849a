"""``python -m optimizer analyze`` on the shipped example logs, and its errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd

from optimizer.cli import main
from optimizer.offline.analyzer import OfflineDataAnalyzer, leave_one_out, loo_summary


def test_shipped_logs_are_real_tool_records(repo_root):
    logs = sorted((repo_root / "examples" / "logs").glob("*.csv"))
    assert {p.stem for p in logs} >= {"mlp", "cnn", "transformer"}
    for p in logs:
        frame = pd.read_csv(p)
        # Written by records.summaries_to_frame from the runner's TrialSummary records.
        for col in ("trial_id", "status", "cpus", "batch_size", "wall_time_s", "throughput",
                    "throughput_source", "cpu_util_mean", "mem_gb_peak", "params"):
            assert col in frame, (p, col)
        assert frame["cpus"].nunique() >= 2 and frame["batch_size"].nunique() >= 2
        assert (frame["mem_gb_peak"] > 0).all()


def test_cli_writes_report_and_prediction(repo_root, tmp_path, capsys):
    out = tmp_path / "analysis"
    code = main(["analyze", "--logs", str(repo_root / "examples" / "logs"), "--model", "cnn",
                 "--params", "20000", "--samples", "4096", "--preference", "cost",
                 "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "cnn[" in text and "transformer[" in text and "prediction (cost, from history)" in text
    for name in ("analysis.md", "analysis.html", "analysis.json", "time_vs_cost.png",
                 "throughput_scaling.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "analysis.json").read_text())
    assert data["prediction"]["source"] == "history"
    assert data["prediction"]["allocation"]["cpus"] >= 1
    assert set(data["best"]) == {m["model"] for m in data["models"]}
    assert data["sla_forecast"]["all"]["n_runs"] >= 6
    md = (out / "analysis.md").read_text()
    assert "## Models" in md and "SLA forecast" in md and "time_vs_cost.png" in md


def test_cli_rejects_a_bad_log_with_status_2(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("foo,bar\n1,2\n")
    assert main(["analyze", "--logs", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "missing" in err


def test_cli_subprocess_help():
    res = subprocess.run([sys.executable, "-m", "optimizer", "analyze", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "--logs" in res.stdout and "--preference" in res.stdout


def test_predictor_beats_global_mean_on_shipped_logs(repo_root):
    a = OfflineDataAnalyzer([repo_root / "examples" / "logs"])
    s = loo_summary(leave_one_out(a.combined_data))
    assert s["runs"] >= 12
    assert s["predictor_throughput_mape"] < s["baseline_throughput_mape"]
    assert s["predictor_time_mape"] < s["baseline_time_mape"]


def test_cli_names_dropped_rows_on_the_console_and_leaves_no_empty_folder(repo_root, tmp_path,
                                                                         capsys):
    frame = pd.read_csv(repo_root / "examples" / "logs" / "mlp.csv")
    frame["throughput"] = frame["throughput"].astype(object)
    frame.loc[2, "throughput"] = "-5"
    log = tmp_path / "mlp.csv"
    frame.to_csv(log, index=False)
    assert main(["analyze", "--logs", str(log), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    err = capsys.readouterr().err
    # the row as a spreadsheet shows it: the third row after the header
    assert (f"warning: {log}: 1 of {len(frame)} rows dropped (1 throughput <= 0 or not "
            "finite: row 3)") in err

    bad = tmp_path / "bad.csv"
    bad.write_text("foo,bar\n1,2\n")
    assert main(["analyze", "--logs", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()


def small_traces(folder):
    """Two workloads, four runs each, 30 samples a run: memory grows with the batch."""
    folder.mkdir()
    runs, samples = [], []
    for w, workload in enumerate(("mlp", "cnn")):
        for i, batch in enumerate((32, 64, 128, 256)):
            exec_id = f"d{w}{i}"
            runs.append({"exec_id": exec_id, "workload": workload, "n": 1000 * (w + 1),
                         "epochs": 2, "batch": batch, "width": 64, "threads": 1 + i % 2,
                         "seed": i, "exit_code": 0, "wall_s": 15.0, "samples": 30})
            for k in range(30):
                stage = "load" if k < 5 else "train"
                samples.append({"exec_id": exec_id, "workload": workload, "time_s": 0.5 * k,
                                "cpu_cores": 0.9 if stage == "load" else 0.95 * (1 + i % 2),
                                "mem_gb": 0.2 if stage == "load" else 0.3 + batch / 512,
                                "stage": stage})
    pd.DataFrame(runs).to_csv(folder / "executions.csv", index=False)
    pd.DataFrame(samples).to_csv(folder / "traces.csv", index=False)
    return folder


def test_cli_reports_right_sized_requests_and_accuracy_from_traces(tmp_path, capsys):
    logs, out = small_traces(tmp_path / "traces"), tmp_path / "analysis"
    assert main(["analyze", "--logs", str(logs), "--accuracy", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "right-sized requests for the next run" in text and "leave-one-out: time MAPE" in text
    data = json.loads((out / "analysis.json").read_text())
    rows = {(r["job"], r["strategy"], r["stage"]): r for r in data["right_sized"]}
    assert {("mlp", s, "whole run") for s in ("cloudopt", "krr-simple", "vpa-style")} <= set(rows)
    assert rows[("mlp", "krr-simple", "whole run")]["runs"] == 4
    assert ("cnn", "cloudopt", "load") in rows  # the load stage needs far less memory
    assert data["accuracy"]["runs"] == 8 and data["accuracy"]["time_coverage"] >= 0
    md = (out / "analysis.md").read_text()
    assert "## Right-sized requests for the next run" in md and "Prediction accuracy" in md


def test_cli_names_a_traces_table_missing_columns(tmp_path, capsys):
    folder = small_traces(tmp_path / "traces")
    pd.read_csv(folder / "traces.csv").drop(columns=["mem_gb"]).to_csv(folder / "traces.csv")
    assert main(["analyze", "--logs", str(folder), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "traces.csv: missing column(s) mem_gb" in err

"""``python -m optimizer phases fit|predict|report`` on a small slice of dl-traces, and plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optimizer.cli import main
from phases import PhaseDetector

DATA = Path(__file__).resolve().parent / "data"
SLICE = DATA / "phases_dl_slice.csv"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("phases") / "model"
    rc = main(
        [
            "phases",
            "fit",
            "--traces",
            str(SLICE),
            "--exec-id",
            "exec_id",
            "--features",
            "cpu_cores,mem_gb",
            "--time",
            "time_s",
            "--phases",
            "3",
            "--epochs",
            "5",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    return out


def test_fit_writes_loadable_model(model_dir):
    model = PhaseDetector.load(model_dir)
    assert model.n_phases_ == 3 and model.epochs == 5
    assert list(model.feature_names_in_) == ["cpu_cores", "mem_gb"]
    assert model.exec_id_col_ == "exec_id" and model.time_col_ == "time_s"


def test_predict_one_row_per_input_row(model_dir, tmp_path):
    out = tmp_path / "phases.csv"
    assert (
        main(
            [
                "phases",
                "predict",
                "--model",
                str(model_dir),
                "--traces",
                str(SLICE),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table, source = pd.read_csv(out, keep_default_na=False), pd.read_csv(SLICE)
    assert len(table) == len(source)
    assert (table["exec_id"] == source["exec_id"]).all()
    assert table.loc[table["note"] == "warm-up", "phase"].eq(-1).all()
    assert (table.loc[table["note"] == "", "phase"].between(0, 2)).all()
    assert (table["note"] == "warm-up").sum() == 3 * source["exec_id"].nunique()


def test_report_files(model_dir, tmp_path):
    out = tmp_path / "report"
    assert (
        main(
            [
                "phases",
                "report",
                "--model",
                str(model_dir),
                "--traces",
                str(SLICE),
                "--out",
                str(out),
                "--labels",
                "stage",
                "--examples",
                "2",
            ]
        )
        == 0
    )
    summary = json.loads((out / "phases.json").read_text())
    assert {"phase_stats", "prototypes", "prototype_coverage", "transitions", "labels"} <= set(
        summary
    )
    matrix = np.array(summary["transitions"]["matrix"])
    assert matrix.shape == (3, 3)
    rows = matrix.sum(1)
    assert np.allclose(rows[rows > 0], 1.0)
    assert 0.0 <= summary["labels"]["nmi"] <= 1.0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "phase_stats.png" in pngs and "transitions.png" in pngs and len(pngs) == 4
    assert all((out / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    text = (out / "report.md").read_text()
    assert "## Prototypes" in text and "(phase_stats.png)" in text
    assert (out / "transitions.dot").read_text().startswith("digraph")


def test_user_errors_exit_2(model_dir, tmp_path, capsys):
    rc = main(
        [
            "phases",
            "fit",
            "--traces",
            str(SLICE),
            "--exec-id",
            "exec_id",
            "--features",
            "cpu,mem_gb",
            "--out",
            str(tmp_path / "m"),
            "--quiet",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "'cpu'" in err and "phases_dl_slice.csv" in err and "cpu_cores" in err
    (tmp_path / "broken").mkdir()
    rc = main(
        [
            "phases",
            "predict",
            "--model",
            str(tmp_path / "broken"),
            "--traces",
            str(SLICE),
            "--out",
            str(tmp_path / "p.csv"),
        ]
    )
    assert rc == 2 and "meta.json" in capsys.readouterr().err
    rc = main(
        [
            "phases",
            "report",
            "--model",
            str(model_dir),
            "--traces",
            str(SLICE),
            "--out",
            str(tmp_path / "r"),
            "--labels",
            "nope",
        ]
    )
    assert rc == 2 and "'nope'" in capsys.readouterr().err


def test_invalid_samples_refused_or_dropped_never_filled(model_dir, tmp_path, capsys):
    frame = pd.read_csv(SLICE)
    frame["cpu_cores"] = frame["cpu_cores"].astype(object)
    frame.loc[3, "cpu_cores"] = "oops"
    frame.loc[7, "mem_gb"] = np.nan
    bad = tmp_path / "bad.csv"
    frame.to_csv(bad, index=False)
    args = ["phases", "predict", "--model", str(model_dir), "--traces", str(bad),
            "--out", str(tmp_path / "p.csv")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "2 invalid value(s)" in err
    assert "column 'cpu_cores' line 5 ('oops')" in err and "column 'mem_gb' line 9 (empty)" in err
    assert not (tmp_path / "p.csv").exists()

    assert main([*args, "--drop-invalid"]) == 0
    assert "warning:" in capsys.readouterr().err
    table = pd.read_csv(tmp_path / "p.csv")
    assert len(table) == len(frame)  # one row per input row, the dropped ones marked
    assert (table.loc[[3, 7], "phase"] == -1).all() and (table.loc[[3, 7], "note"] == "dropped").all()


def test_fit_takes_the_detector_options_and_names_a_bad_one(tmp_path, capsys):
    base = ["phases", "fit", "--traces", str(SLICE), "--exec-id", "exec_id", "--features",
            "cpu_cores,mem_gb", "--time", "time_s", "--phases", "3", "--epochs", "3",
            "--device", "cpu", "--quiet"]
    out = tmp_path / "whole"
    assert main([*base, "--feature-set", "whole+whole-diff", "--smoothing", "viterbi",
                 "--stay-prob", "0.95", "--min-duration", "2", "--window-weight", "2",
                 "--out", str(out)]) == 0
    model = PhaseDetector.load(out)
    assert (model.features, model.smoothing, model.stay_prob, model.min_duration,
            model.window_weight) == ("whole+whole-diff", "viterbi", 0.95, 2, 2.0)
    assert model.cluster_centers_.shape[1] > model.n_hidden
    capsys.readouterr()
    assert main([*base, "--feature-set", "whole-speed", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "whole-speed" in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()

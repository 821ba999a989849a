"""``--history SPEC`` routing for the forms whose readers live elsewhere (CSV logs, traces), and
the names map the MLflow and TensorBoard readers share."""

from __future__ import annotations

import pytest

from optimizer.foundation.errors import HistoryError
from optimizer.history.names import canonical_curve, canonical_param, canonical_params
from optimizer.history.sources import read_histories, read_history


def test_csv_and_trace_specs_reach_their_readers(tmp_path):
    # the CSV-log and trace readers are optimizer.history.csv_logs and .traces; until this
    # build has them, each form says which reader it needs
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run1.csv").write_text("time_s,cpu_cores\n0,1\n")
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "traces.csv").write_text("exec_id,time_s\n")
    for spec in (f"csv:{tmp_path / 'logs'}", str(tmp_path / "logs"),
                 str(tmp_path / "logs" / "run1.csv")):
        with pytest.raises(HistoryError, match="read_csv_history"):
            read_history(spec)
    for spec in (f"traces:{tmp_path / 'traces'}", str(tmp_path / "traces")):
        with pytest.raises(HistoryError, match="read_trace_history"):
            read_history(spec)


def test_no_specs_is_an_empty_history():
    assert len(read_histories([])) == 0


@pytest.mark.parametrize("logged,canon", [
    ("batch_size", "batch_size"), ("per_device_train_batch_size", "batch_size"),
    ("hparams/bs", "batch_size"), ("Batch-Size", "batch_size"), ("num_train_epochs", "epochs"),
    ("learning_rate", "lr"), ("dataloader_num_workers", "workers"), ("d_model", "width"),
    ("world_size", None), ("optimizer", None)])
def test_param_names(logged, canon):
    assert canonical_param(logged) == canon


@pytest.mark.parametrize("tag,canon", [
    ("loss", "loss"), ("train/loss", "loss"), ("Loss/train", "loss"), ("train_loss", "loss"),
    ("val_loss", "val_loss"), ("samples_per_sec", "throughput"),
    ("train_samples_per_second", "throughput"), ("lr", "lr")])
def test_curve_names(tag, canon):
    assert canonical_curve(tag) == canon


def test_params_keep_text_and_the_first_of_two_aliases():
    params, text = canonical_params({"bs": "64", "batch_size": 32, "lr": "3e-4",
                                     "optimizer": "adam", "epochs": "nan"})
    assert params == {"batch_size": 64.0, "lr": 3e-4}
    assert text == {"param.batch_size": "32", "param.optimizer": "adam", "param.epochs": "nan"}

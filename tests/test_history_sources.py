"""``--history SPEC`` routing for the forms whose readers live elsewhere (CSV logs, traces), and
the names map the MLflow and TensorBoard readers share."""

from __future__ import annotations

import pytest

from optimizer.foundation.errors import CloudoptError
from optimizer.history.names import canonical_curve, canonical_param, canonical_params
from optimizer.history.sources import read_histories, read_history


def test_csv_and_trace_specs_reach_their_readers(tmp_path, repo_root, shared_data):
    logs = repo_root / "examples" / "logs"
    for spec in (f"csv:{logs}", str(logs), str(logs / "mlp.csv")):
        history = read_history(spec)
        assert len(history) > 0 and {r.source.split(":")[0] for r in history} == {"csv"}
    traces = shared_data / "dl-traces"
    for spec in (f"traces:{traces}", str(traces)):
        history = read_history(spec)
        assert len(history) == 60 and all(r.usage is not None for r in history)
    # a file that is neither names itself and what it lacks, in one line
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run1.csv").write_text("time_s,cpu_cores\n0,1\n")
    with pytest.raises(CloudoptError, match="run1.csv"):
        read_history(str(tmp_path / "logs" / "run1.csv"))


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

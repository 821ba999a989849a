"""The TensorBoard reader on event files written by PyTorch's ``SummaryWriter`` (scalars old
and new style, ``add_hparams``, a restarted run), and on event files cut short or damaged."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import need

from optimizer.foundation.errors import HistoryError
from optimizer.history.sources import read_history
from optimizer.history.tensorboard_events import read_tensorboard

need("tensorboard", "pip install -e '.[history]'")
from torch.utils.tensorboard import SummaryWriter  # noqa: E402


def _write(folder, losses, rates, *, new_style=False, hparams=None, first_step=0):
    with SummaryWriter(log_dir=str(folder)) as writer:
        for i, (loss, rate) in enumerate(zip(losses, rates, strict=True)):
            writer.add_scalar("train/loss", loss, first_step + i, new_style=new_style)
            writer.add_scalar("samples_per_sec", rate, first_step + i, new_style=new_style)
            writer.add_scalar("lr", 0.1, first_step + i, new_style=new_style)
        if hparams:
            writer.add_hparams(hparams, {"hparam/final_loss": losses[-1]})


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tb") / "logs"
    _write(root / "resnet" / "lr0.1", [2.0, 1.5, 1.1, 0.8], [300.0, 310.0, 290.0, 305.0],
           hparams={"batch_size": 64, "lr": 0.1, "optimizer": "sgd"})
    _write(root / "resnet" / "lr0.3", [2.0, 1.9, 1.7], [280.0, 270.0, 275.0], new_style=True,
           hparams={"bs": 128, "max_epochs": 5})
    _write(root / "mlp", [1.0, 0.5, 0.4], [900.0, 950.0, 1000.0])
    # a restart: the second writer rewrites steps 2 and 3 and goes on
    _write(root / "mlp", [0.45, 0.35, 0.3], [960.0, 970.0, 980.0], first_step=2)
    return root


def test_a_run_per_folder_with_curves_outcomes_and_hparams(logdir):
    history = read_tensorboard(logdir)
    runs = {r.run_id: r for r in history}
    assert set(runs) == {"resnet/lr0.1", "resnet/lr0.3", "mlp"}  # add_hparams' folders merged
    lr01, lr03, mlp = runs["resnet/lr0.1"], runs["resnet/lr0.3"], runs["mlp"]
    assert (lr01.job, lr03.job, mlp.job) == ("resnet", "resnet", "logs")
    assert lr01.source == f"tensorboard:{logdir}"
    assert np.array_equal(lr01.curves["loss"][0], [0, 1, 2, 3])
    assert np.allclose(lr01.curves["loss"][1], [2.0, 1.5, 1.1, 0.8])
    assert np.allclose(lr01.curves["lr"][1], 0.1)
    assert lr01.outcome["final_loss"] == pytest.approx(0.8)
    assert lr01.outcome["throughput"] == pytest.approx(302.5)  # median of the steps
    assert 0 <= lr01.outcome["wall_s"] < 60 and lr01.started_at > 1.6e9
    assert dict(lr01.params) == {"batch_size": 64.0, "lr": 0.1}
    assert lr01.tags["param.optimizer"] == "sgd"
    assert dict(lr03.params) == {"batch_size": 128.0, "epochs": 5.0}
    assert np.allclose(lr03.curves["loss"][1], [2.0, 1.9, 1.7])  # the scalars plugin's tensors
    assert lr03.outcome["final_loss"] == pytest.approx(1.7)


def test_a_restarted_run_keeps_the_later_values(logdir):
    (mlp,) = [r for r in read_tensorboard(logdir) if r.run_id == "mlp"]
    steps, losses = mlp.curves["loss"]
    assert np.array_equal(steps, [0, 1, 2, 3, 4])
    assert np.allclose(losses, [1.0, 0.5, 0.45, 0.35, 0.3])
    assert mlp.outcome["final_loss"] == pytest.approx(0.3) and mlp.params == {}


def test_the_dispatcher_takes_the_prefix_or_a_plain_folder(logdir):
    plain = read_history(str(logdir))
    prefixed = read_history(f"tensorboard:{logdir}")
    assert [r.run_id for r in plain] == [r.run_id for r in prefixed]
    assert len(read_history(str(logdir / "resnet"))) == 2
    assert [r.job for r in read_history(str(logdir / "mlp"))] == ["mlp"]


def _one_file(folder):
    (path,) = [p for p in folder.iterdir() if "tfevents" in p.name]
    return path


def test_a_truncated_event_file_is_named(logdir, tmp_path):
    run = tmp_path / "cut"
    _write(run, [1.0, 0.9, 0.8], [10.0, 11.0, 12.0])
    path = _one_file(run)
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(HistoryError) as e:
        read_tensorboard(tmp_path)
    assert str(e.value).startswith(f"TensorBoard event file {path} is truncated or corrupt "
                                   "after ")
    assert "truncated record in data" in str(e.value)


def test_a_corrupt_event_file_is_named(tmp_path):
    run = tmp_path / "bad"
    _write(run, [1.0, 0.9], [10.0, 11.0])
    path = _one_file(run)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(HistoryError, match=r"is truncated or corrupt after \d+ record\(s\): "
                                           r"it failed (event|header) crc32 check"):
        read_tensorboard(tmp_path)
    (tmp_path / "other" ).mkdir()
    (tmp_path / "other" / "events.out.tfevents.1.host").write_bytes(b"not an event file at all")
    with pytest.raises(HistoryError, match="other/events.out.tfevents.1.host is truncated"):
        read_tensorboard(tmp_path / "other")


def test_folders_without_event_files(tmp_path):
    with pytest.raises(HistoryError, match=f"no TensorBoard event files .* under {tmp_path}$"):
        read_tensorboard(tmp_path)
    with pytest.raises(HistoryError, match="TensorBoard log folder .*/absent does not exist"):
        read_history(f"tensorboard:{tmp_path / 'absent'}")
    with pytest.raises(HistoryError, match="holds no cloudopt run folder, TensorBoard event files, CSV logs or "
                                           "traces.csv"):
        read_history(str(tmp_path))
    with pytest.raises(HistoryError, match="is no file or folder here, nor one of: prometheus"):
        read_history(str(tmp_path / "absent"))

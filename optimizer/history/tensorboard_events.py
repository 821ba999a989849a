"""Training runs from TensorBoard event files.

Spec (``--history``): ``tensorboard:<dir>``, or a plain directory that holds event files
(``events.out.tfevents.*``) anywhere below it.

Each folder that holds event files is one run (TensorBoard's own rule), ``run_id`` its path
under ``<dir>`` (``<dir>``'s name for files directly in it). Its ``job`` is the folder above
the run, so ``logs/resnet/lr0.1`` and ``logs/resnet/lr0.3`` are two runs of job ``resnet``;
a run directly under ``<dir>`` (``runs/Nov28_15-39-00_host``, PyTorch's default layout)
belongs to the job named after ``<dir>``.

Read per run, from every event file in the folder (in the order they were started, so a
restarted run's later file wins for a step written twice):

- ``curves``: each scalar tag by step, ``loss`` and ``throughput`` under those names whatever the
  tag (``train/loss``, ``Loss/train``, ``samples_per_sec``; :mod:`.names`); old-style simple
  values and the scalars plugin's tensors alike;
- ``outcome``: ``final_loss`` (the loss at the last step), ``throughput`` (the value where it was
  logged once, else the median over steps), ``wall_s`` (first to last event);
- ``params``: the hparams plugin's session start info where the run logged one, mapped like
  MLflow's params; PyTorch's ``SummaryWriter.add_hparams`` writes it into a subfolder of the
  run, which is merged into the run rather than read as a run of its own.

The records are read with TensorBoard's own record reader, which checks each record's CRC. A
truncated or corrupt record is an error naming the file, not the silent end of the run that
TensorBoard's viewer (which expects files still being written) makes of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.errors import HistoryError
from optimizer.history.names import canonical_curve, canonical_params, curve_outcome
from optimizer.history.run import History, HistoryRun

try:
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors as tb_errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
    from tensorboard.plugins.hparams import metadata as hparams_metadata
    from tensorboard.util import tensor_util
except ImportError:  # the history extra is not installed: read_tensorboard says so
    event_pb2 = None


@dataclass
class _Folder:
    """What one folder's event files hold."""

    scalars: dict[str, dict[int, float]] = field(default_factory=dict)
    hparams: dict[str, Any] = field(default_factory=dict)
    first_wall: float = float("inf")
    last_wall: float = float("-inf")


def event_folders(root: Path) -> list[Path]:
    """Folders under ``root`` (itself included) that hold event files, sorted."""
    return sorted({p.parent for p in root.rglob("*tfevents*") if p.is_file()})


def read_tensorboard(logdir: str | Path) -> History:
    """Every run (folder of event files) under ``logdir``."""
    root = Path(logdir)
    if not root.is_dir():
        raise HistoryError(f"TensorBoard log folder {root} does not exist")
    folders = event_folders(root)
    if not folders:
        raise HistoryError(f"no TensorBoard event files (events.out.tfevents.*) under {root}")
    if event_pb2 is None:
        raise HistoryError("reading TensorBoard event files needs the tensorboard package "
                           "(pip install 'cloudopt[history]')")
    read = {folder: _read_folder(folder) for folder in folders}
    merged = set()
    for folder, content in read.items():
        parent = read.get(folder.parent) if folder != root else None
        summary_only = all(len(by_step) <= 1 for by_step in content.scalars.values())
        if parent is not None and content.hparams and summary_only:
            # add_hparams' subfolder: the settings of the run above it and one value per
            # metric, not a run of its own
            parent.hparams = {**content.hparams, **parent.hparams}
            merged.add(folder)
    return History.of(_run(root, folder, content) for folder, content in read.items()
                      if folder not in merged)


def _run(root: Path, folder: Path, content: _Folder) -> HistoryRun:
    rel = folder.relative_to(root)
    run_id = rel.as_posix() if rel.parts else root.name
    job = rel.parent.as_posix() if len(rel.parts) > 1 else root.resolve().name
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for tag, by_step in sorted(content.scalars.items()):
        name = canonical_curve(tag)
        name = tag if name in curves else name
        steps = np.array(sorted(by_step), dtype=float)
        curves[name] = (steps, np.array([by_step[int(s)] for s in steps], dtype=float))
    outcome = curve_outcome(curves)
    if content.last_wall > content.first_wall:
        outcome["wall_s"] = content.last_wall - content.first_wall
    params, text = canonical_params(content.hparams)
    return HistoryRun(
        run_id=run_id, job=job, source=f"tensorboard:{root}",
        started_at=content.first_wall if np.isfinite(content.first_wall) else None,
        params=params, outcome=outcome, curves=curves, tags={"folder": str(folder), **text})


def _read_folder(folder: Path) -> _Folder:
    content = _Folder()
    files = [_events(p) for p in sorted(folder.iterdir()) if p.is_file() and "tfevents" in p.name]
    # by the time each file was started (a name's counter sorts 10 before 2)
    for events in sorted(files, key=lambda events: events[0].wall_time if events else 0.0):
        for event in events:
            if event.wall_time:
                content.first_wall = min(content.first_wall, event.wall_time)
                content.last_wall = max(content.last_wall, event.wall_time)
            for value in event.summary.value:
                _take(content, event.step, value)
    return content


def _take(content: _Folder, step: int, value: Any) -> None:
    plugin = value.metadata.plugin_data.plugin_name
    if value.HasField("simple_value"):
        content.scalars.setdefault(value.tag, {})[int(step)] = float(value.simple_value)
    elif plugin == "scalars" and value.HasField("tensor"):
        number = tensor_util.make_ndarray(value.tensor)
        if number.size == 1:
            content.scalars.setdefault(value.tag, {})[int(step)] = float(number.reshape(-1)[0])
    elif plugin == hparams_metadata.PLUGIN_NAME and \
            value.tag == hparams_metadata.SESSION_START_INFO_TAG:
        info = hparams_metadata.parse_session_start_info_plugin_data(
            value.metadata.plugin_data.content)
        for name, logged in info.hparams.items():
            kind = logged.WhichOneof("kind")
            content.hparams[name] = getattr(logged, kind) if kind else None


def _events(path: Path) -> list[Any]:
    """Every event in one file, each record's length and data CRC-checked."""
    reader = PyRecordReader_New(str(path))
    events = []
    while True:
        try:
            reader.GetNext()
        except tb_errors.OutOfRangeError:
            return events
        except tb_errors.DataLossError as e:
            raise HistoryError(f"TensorBoard event file {path} is truncated or corrupt after "
                               f"{len(events)} record(s): {e.message.replace(str(path), 'it')}"
                               ) from None
        try:
            events.append(event_pb2.Event.FromString(reader.record()))
        except DecodeError:
            raise HistoryError(f"TensorBoard event file {path}: record {len(events) + 1} is no "
                               "Event (not an event file?)") from None

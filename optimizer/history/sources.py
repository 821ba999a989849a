"""``--history SPEC``: which reader a spec names, so one flag takes any store.

- ``prometheus+http://HOST:PORT?selector={...}&start=...&end=...&step=...`` (``+https`` too):
  :mod:`.prometheus`;
- ``mlflow:<tracking-uri>[#experiment]``: :mod:`.mlflow_runs`;
- ``tensorboard:<dir>``, or a folder with TensorBoard event files anywhere below it:
  :mod:`.tensorboard_events`;
- ``csv:<path>``, a ``.csv`` file, or a folder of CSV logs: ``csv_logs.read_csv_history``;
- ``traces:<dir>``, or a folder holding ``traces.csv`` (the ``dl-traces`` form):
  ``traces.read_trace_history``;
- ``cloudopt:<dir>``, or a cloudopt run folder (``--output``) or a folder of them: the trials
  of earlier searches, :mod:`.run_folder`.

A plain folder is tried in this order: a cloudopt run folder (or a folder of them), then
``traces.csv`` in it, then event files below it, then CSV files in it. Several specs are read one by one and merged (:func:`read_histories`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from optimizer.foundation.errors import HistoryError
from optimizer.history.csv_logs import read_csv_history
from optimizer.history.mlflow_runs import read_mlflow_spec
from optimizer.history.prometheus import read_prometheus_spec
from optimizer.history.run import History
from optimizer.history.run_folder import read_run_folders, run_folders
from optimizer.history.tensorboard_events import event_folders, read_tensorboard
from optimizer.history.traces import read_trace_history

FORMS = ("prometheus+http://HOST:PORT?selector={...}&start=...&end=...&step=...",
         "mlflow:<tracking-uri>[#experiment]", "tensorboard:<dir>", "csv:<path>",
         "traces:<dir>", "cloudopt:<run folder>", "a .csv file or a folder of logs")


def read_history(spec: str) -> History:
    """The runs one ``--history`` spec names (forms in the module docstring)."""
    spec = spec.strip()
    if spec.startswith(("prometheus://", "prometheus+http://", "prometheus+https://")):
        return read_prometheus_spec(spec)
    if spec.startswith("mlflow:"):
        return read_mlflow_spec(spec)
    if spec.startswith("tensorboard:"):
        return read_tensorboard(spec.removeprefix("tensorboard:"))
    if spec.startswith("csv:"):
        return _read_csv_logs(Path(spec.removeprefix("csv:")))
    if spec.startswith("traces:"):
        return _read_traces(Path(spec.removeprefix("traces:")))
    if spec.startswith("cloudopt:"):
        return read_run_folders(spec.removeprefix("cloudopt:"))
    path = Path(spec)
    if path.is_file() and path.suffix.lower() == ".csv":
        return _read_csv_logs(path)
    if path.is_dir():
        if run_folders(path):
            return read_run_folders(path)
        if (path / "traces.csv").is_file():
            return _read_traces(path)
        if event_folders(path):
            return read_tensorboard(path)
        if any(path.glob("*.csv")):
            return _read_csv_logs(path)
        raise HistoryError(f"history folder {path} holds no cloudopt run folder, TensorBoard "
                           "event files, CSV logs or traces.csv")
    raise HistoryError(f"history spec {spec!r} is no file or folder here, nor one of: "
                       f"{'; '.join(FORMS)}")


def read_histories(specs: Iterable[str]) -> History:
    """Every spec's runs, merged in start order."""
    history = History(())
    for spec in specs:
        history = history.merged(read_history(spec))
    return history


def _read_csv_logs(path: Path) -> History:
    return read_csv_history(path)


def _read_traces(path: Path) -> History:
    return read_trace_history(path)

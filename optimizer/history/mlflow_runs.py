"""Training runs from an MLflow tracking store.

Spec (``--history``)::

    mlflow:<tracking-uri>[#<experiment name or id>]

such as ``mlflow:sqlite:///mlflow.db#mlp``, ``mlflow:http://mlflow.internal:5000``, or
``mlflow:./mlruns`` (a file store). Without an experiment every experiment's runs are read.

Per run (one :class:`HistoryRun`, ``run_id`` MLflow's):

- ``params``: the logged params that name a canonical setting (``batch_size``, ``epochs``,
  ``lr``, ... through :mod:`.names`, numbers only); the others are kept as ``param.<name>``
  tags;
- ``curves``: every metric's history by step (``loss`` and ``throughput`` under those names
  whatever the run called them), ``system/...`` metrics apart;
- ``outcome``: ``final_loss``, the loss's last value (largest step); ``throughput``, the
  metric's value where it was logged once (a whole-run figure, as Hugging Face's Trainer logs
  ``train_samples_per_second``), else the median over steps (the first and last steps carry
  warm-up and teardown); ``wall_s`` from the run's start and end times;
- ``usage`` from MLflow's system metrics where the run logged them
  (``system/cpu_utilization_percentage``, ``system/system_memory_usage_megabytes``, summed over
  nodes where each logs under ``system/<node>/``). Both are the machine's, not the process's:
  memory is the machine's memory in use (MLflow's megabytes are 10^6 bytes), an upper bound
  of the run's; CPU is a share of the machine's cores, so it is in cores only where
  ``machine_cores`` is given and NaN otherwise (MLflow does not record the count);
- ``job``: the run's ``job`` tag where it has one, else its experiment's name.

A missing ``sqlite:`` or file store is an error, never a new empty store. For a tracking server,
requests are not retried (MLflow's default retries for minutes) unless
``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` says otherwise.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.errors import HistoryError
from optimizer.history.names import canonical_curve, canonical_params, curve_outcome
from optimizer.history.run import History, HistoryRun, UsageSeries

GIB = float(2**30)
_SYSTEM = re.compile(r"^system/(?:(?P<node>[^/]+)/)?(?P<name>cpu_utilization_percentage|"
                     r"system_memory_usage_megabytes)$")
_INSTALL = "pip install 'cloudopt[history]'"


def read_mlflow(tracking_uri: str, experiment: str | None = None, *,
                machine_cores: float | None = None) -> History:
    """Every run of ``experiment`` (name or id; every experiment when None) in the store."""
    try:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException
    except ImportError:
        raise HistoryError(f"reading MLflow history needs the mlflow package ({_INSTALL})"
                           ) from None
    _check_local_store(tracking_uri)
    try:
        with _no_retries():
            client = MlflowClient(tracking_uri=tracking_uri)
            experiments = _experiments(client, tracking_uri, experiment)
            names = {e.experiment_id: e.name for e in experiments}
            runs = [run for run in _paged(client.search_runs, list(names))]
            if not runs:
                raise HistoryError(f"MLflow store {tracking_uri} has no runs in experiment(s) "
                                   f"{', '.join(sorted(names.values()))}")
            return History.of(_run(client, tracking_uri, run, names, machine_cores)
                              for run in runs)
    except MlflowException as e:
        message = str(e.message).strip()
        if "Connection refused" in message or "NewConnectionError" in message:
            message = "connection refused (is the tracking server running there?)"
        raise HistoryError(f"MLflow store {tracking_uri}: {message.splitlines()[0][:300]}"
                           ) from None


def read_mlflow_spec(spec: str) -> History:
    """:func:`read_mlflow` of ``mlflow:<tracking-uri>[#experiment]``."""
    body = spec.removeprefix("mlflow:")
    uri, _, experiment = body.partition("#")
    if not uri:
        raise HistoryError(f"history spec {spec!r} names no tracking URI "
                           "(mlflow:sqlite:///mlflow.db#experiment)")
    return read_mlflow(uri, experiment or None)


def _check_local_store(uri: str) -> None:
    """A sqlite or file store must exist: MLflow would create an empty one."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))  # sqlite:////abs is /abs
        if not path.is_file():
            raise HistoryError(f"no MLflow store at {path} (from {uri})")
    elif uri.startswith("file:") or (":" not in uri and uri != "databricks"):
        path = Path(uri.removeprefix("file://").removeprefix("file:"))
        if not path.is_dir():
            raise HistoryError(f"no MLflow file store at {path} (from {uri})")


@contextlib.contextmanager
def _no_retries() -> Iterator[None]:
    key = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
    before = os.environ.get(key)
    if before is None:
        os.environ[key] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)


def _paged(search: Any, *args: Any) -> Iterator[Any]:
    token = None
    while True:
        page = search(*args, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def _experiments(client: Any, uri: str, wanted: str | None) -> list[Any]:
    every = list(_paged(client.search_experiments))
    if wanted is None:
        return every
    chosen = [e for e in every if wanted in (e.name, e.experiment_id)]
    if not chosen:
        known = ", ".join(sorted(e.name for e in every)) or "none"
        raise HistoryError(f"MLflow store {uri} has no experiment {wanted!r}; "
                           f"experiments there: {known}")
    return chosen


def _run(client: Any, uri: str, run: Any, experiments: dict[str, str],
         machine_cores: float | None) -> HistoryRun:
    info, data = run.info, run.data
    params, text = canonical_params(dict(data.params))
    histories = {key: sorted(client.get_metric_history(info.run_id, key),
                             key=lambda m: (m.step, m.timestamp)) for key in data.metrics}
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for key, points in histories.items():
        if not key.startswith("system/") and points:
            name = canonical_curve(key)
            name = key if name in curves else name
            curves[name] = (np.array([m.step for m in points], dtype=float),
                            np.array([m.value for m in points], dtype=float))
    outcome = curve_outcome(curves)
    if info.end_time and info.start_time:
        outcome["wall_s"] = (info.end_time - info.start_time) / 1000.0
    experiment = experiments.get(info.experiment_id, info.experiment_id)
    tags = {k: str(v) for k, v in data.tags.items() if not k.startswith("mlflow.")}
    tags.update(text, experiment=experiment, status=str(info.status),
                run_name=str(info.run_name or ""))
    return HistoryRun(
        run_id=info.run_id, job=tags.get("job") or experiment, source=f"mlflow:{uri}",
        started_at=info.start_time / 1000.0 if info.start_time else None, params=params,
        outcome=outcome, usage=_usage(histories, machine_cores), curves=curves, tags=tags)


def _usage(histories: dict[str, list[Any]], machine_cores: float | None) -> UsageSeries | None:
    """The system metrics as one series: per step, summed over nodes."""
    by_name: dict[str, dict[str, dict[int, Any]]] = {}
    for key, points in histories.items():
        match = _SYSTEM.match(key)
        if match:
            by_step = {m.step: m for m in points}
            by_name.setdefault(match["name"], {})[match["node"] or ""] = by_step
    cpu, mem = by_name.get("cpu_utilization_percentage"), by_name.get(
        "system_memory_usage_megabytes")
    if not cpu or not mem:
        return None
    nodes = sorted(set(cpu) & set(mem))
    steps = sorted(set.intersection(*(set(cpu[n]) & set(mem[n]) for n in nodes)))
    if not nodes or not steps:
        return None
    stamps = np.array([min(mem[n][s].timestamp for n in nodes) for s in steps], dtype=float)
    share = np.array([sum(cpu[n][s].value for n in nodes) for s in steps]) / 100.0
    cores = share * machine_cores if machine_cores else np.full(len(steps), np.nan)
    mem_gb = np.array([sum(mem[n][s].value for n in nodes) for s in steps]) * 1e6 / GIB
    order = np.argsort(stamps, kind="stable")  # nodes' clocks may disagree by a little
    stamps = stamps[order]
    return UsageSeries(time_s=(stamps - stamps[0]) / 1000.0, cpu_cores=cores[order],
                       mem_gb=mem_gb[order])

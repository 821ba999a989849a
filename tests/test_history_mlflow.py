"""The MLflow reader on a ``sqlite:///`` tracking store written by the real ``mlflow`` client:
params under the names teams use, metrics by step, system metrics logged as MLflow logs them
(and once by MLflow's own system-metrics monitor)."""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest
from conftest import need

from optimizer.foundation.errors import HistoryError
from optimizer.history.mlflow_runs import read_mlflow
from optimizer.history.sources import read_history

mlflow = need("mlflow", "pip install -e '.[history]'")
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric, Param  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:mlflow.store")
GIB = 2**30
T0 = 1_714_521_600_000  # ms, 2024-05-01T00:00:00Z


def _log(client, experiment_id, *, name, params, loss, throughput, start_ms, tags=None,
         system=None):
    run = client.create_run(experiment_id, run_name=name, start_time=start_ms, tags=tags or {})
    run_id = run.info.run_id
    metrics = [Metric("loss", v, start_ms + 1000 * i, i) for i, v in enumerate(loss)]
    if isinstance(throughput, float):
        metrics.append(Metric("train_samples_per_second", throughput, start_ms + 9000, 0))
    else:
        metrics += [Metric("samples_per_sec", v, start_ms + 1000 * i, i)
                    for i, v in enumerate(throughput)]
    for i, (pct, mb) in enumerate(system or []):
        stamp = start_ms + 2000 * i
        metrics += [Metric("system/cpu_utilization_percentage", pct, stamp, i),
                    Metric("system/system_memory_usage_megabytes", mb, stamp, i),
                    Metric("system/gpu_0_utilization_percentage", 0.0, stamp, i)]
    client.log_batch(run_id, metrics=metrics,
                     params=[Param(k, str(v)) for k, v in params.items()])
    client.set_terminated(run_id, end_time=start_ms + 10_000)
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A sqlite store: experiments ``mlp`` (three runs), ``cnn`` (one), ``empty`` (none),
    ``monitored`` (one, with MLflow's own system metrics)."""
    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    uri = f"sqlite:///{path}"
    client = MlflowClient(tracking_uri=uri)
    mlp, cnn = client.create_experiment("mlp"), client.create_experiment("cnn")
    client.create_experiment("empty")
    ids = {
        "a": _log(client, mlp, name="a", start_ms=T0,
                  params={"batch_size": 64, "num_epochs": 3, "learning_rate": "1e-3",
                          "optimizer": "adam"},
                  loss=[2.0, 1.2, 0.9, 0.7], throughput=[100.0, 400.0, 420.0, 410.0, 50.0],
                  system=[(25.0, 1000.0), (50.0, 1500.0), (75.0, 2000.0)]),
        "b": _log(client, mlp, name="b", start_ms=T0 + 60_000,
                  params={"per_device_train_batch_size": 128, "epochs": 2, "lr": 0.01},
                  loss=[2.1, 1.0], throughput=812.5, tags={"job": "nightly"}),
        "c": _log(client, mlp, name="c", start_ms=T0 + 120_000, params={"bs": 32},
                  loss=[1.5], throughput=[90.0]),
        "d": _log(client, cnn, name="d", start_ms=T0 + 30_000,
                  params={"batch": 256, "hidden_size": 512, "num_layers": 4},
                  loss=[3.0, 2.5, 2.2], throughput=[50.0, 55.0, 60.0]),
    }
    _monitored(uri, client.create_experiment("monitored"))
    return uri, path, ids, {"mlp": mlp, "cnn": cnn}


def _monitored(uri: str, experiment_id: str) -> None:
    """A run sampled by MLflow's own system-metrics monitor for a second or so."""
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_system_metrics_sampling_interval(0.2)
    mlflow.set_system_metrics_samples_before_logging(1)
    client = MlflowClient(tracking_uri=uri)
    try:
        with mlflow.start_run(experiment_id=experiment_id, run_name="monitored",
                              log_system_metrics=True) as run:
            mlflow.log_param("batch_size", 16)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and len(client.get_metric_history(
                    run.info.run_id, "system/system_memory_usage_megabytes")) < 3:
                time.sleep(0.2)
    finally:
        mlflow.set_system_metrics_sampling_interval(None)
        mlflow.set_system_metrics_samples_before_logging(None)
        mlflow.set_tracking_uri(before)


def test_runs_params_metrics_and_outcomes(store):
    uri, path, ids, experiments = store
    history = read_mlflow(uri)
    assert [r.tags["run_name"] for r in history] == ["a", "d", "b", "c", "monitored"]
    a, d, b, c, monitored = history  # in start order
    assert a.run_id == ids["a"] and a.source == f"mlflow:{uri}"
    assert a.started_at == T0 / 1000
    assert dict(a.params) == {"batch_size": 64.0, "epochs": 3.0, "lr": 1e-3}
    assert a.tags["param.optimizer"] == "adam" and a.tags["status"] == "FINISHED"
    assert a.outcome == {"final_loss": 0.7, "throughput": 400.0, "wall_s": 10.0}
    assert np.array_equal(a.curves["loss"][0], [0, 1, 2, 3])
    assert np.array_equal(a.curves["throughput"][1], [100, 400, 420, 410, 50])
    assert b.params["batch_size"] == 128 and b.params["lr"] == 0.01
    assert b.outcome["throughput"] == 812.5  # one whole-run figure is taken as it is
    assert c.params == {"batch_size": 32.0} and c.outcome["final_loss"] == 1.5
    assert d.params == {"batch_size": 256.0, "width": 512.0, "layers": 4.0}
    assert [r.job for r in history] == ["mlp", "cnn", "nightly", "mlp", "monitored"]
    assert not any(k.startswith("system/") for r in history for k in r.curves)


def test_system_metrics_are_a_usage_series(store):
    uri, path, ids, experiments = store
    a = next(r for r in read_mlflow(uri, "mlp") if r.run_id == ids["a"])
    assert np.array_equal(a.usage.time_s, [0.0, 2.0, 4.0])
    assert np.allclose(a.usage.mem_gb, np.array([1000, 1500, 2000]) * 1e6 / GIB)
    assert np.isnan(a.usage.cpu_cores).all()  # a share of a machine of unknown size
    assert a.value("peak_mem_gb") == pytest.approx(2e9 / GIB)
    sized = next(r for r in read_mlflow(uri, "mlp", machine_cores=8) if r.run_id == ids["a"])
    assert np.allclose(sized.usage.cpu_cores, [2.0, 4.0, 6.0])
    assert all(r.usage is None for r in read_mlflow(uri, "cnn"))


def test_an_experiment_by_name_or_id_and_the_spec(store):
    uri, path, ids, experiments = store
    assert {r.run_id for r in read_mlflow(uri, "cnn")} == {ids["d"]}
    assert {r.run_id for r in read_mlflow(uri, experiments["cnn"])} == {ids["d"]}
    assert len(read_history(f"mlflow:{uri}#mlp")) == 3
    assert len(read_history(f"mlflow:{uri}")) == 5


def test_mlflows_own_system_metrics_monitor_is_read(store):
    """A run that MLflow's monitor sampled (psutil), so the names are MLflow's own."""
    uri, path, ids, experiments = store
    (run,) = read_mlflow(uri, "monitored", machine_cores=os.cpu_count())
    assert run.params == {"batch_size": 16.0} and run.job == "monitored"
    assert len(run.usage) >= 3
    total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    assert 0 < run.value("peak_mem_gb") < total_gib
    assert np.all((run.usage.cpu_cores >= 0) & (run.usage.cpu_cores <= os.cpu_count()))


def test_an_experiment_that_is_not_there_names_those_that_are(store):
    uri, path, ids, experiments = store
    with pytest.raises(HistoryError, match=r"has no experiment 'resnet'; experiments there: "
                                           r"Default, cnn, empty, mlp, monitored$"):
        read_mlflow(uri, "resnet")


def test_an_experiment_without_runs(store):
    uri, path, ids, experiments = store
    with pytest.raises(HistoryError, match=r"has no runs in experiment\(s\) empty$"):
        read_history(f"mlflow:{uri}#empty")


def test_a_missing_store_is_not_created(tmp_path):
    missing = tmp_path / "nope.db"
    with pytest.raises(HistoryError, match=f"no MLflow store at {missing}"):
        read_mlflow(f"sqlite:///{missing}")
    assert not missing.exists()
    with pytest.raises(HistoryError, match="no MLflow file store at"):
        read_history(f"mlflow:{tmp_path / 'mlruns'}")
    with pytest.raises(HistoryError, match="names no tracking URI"):
        read_history("mlflow:#mlp")


def test_an_unreachable_tracking_server_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(HistoryError) as e:
        read_mlflow(f"http://127.0.0.1:{port}")
    assert str(e.value) == (f"MLflow store http://127.0.0.1:{port}: connection refused "
                            "(is the tracking server running there?)")
    assert time.monotonic() - start < 30  # no retries with back-off

"""The Prometheus reader against a real Prometheus (Debian's ``prometheus``; skipped where it is
missing, failed in CI, which installs it) over a TSDB backfilled with ``promtool`` from the
``dl-traces`` set: each execution is a pod with cAdvisor's two series, its CPU counter
integrated from the trace's ``cpu_cores``, its working set from ``mem_gb``; a few pods carry
kube-state-metrics' owner, request and limit series too."""

from __future__ import annotations

import csv
import hashlib
import shutil
import socket
import subprocess
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from conftest import missing

from optimizer.foundation.errors import HistoryError
from optimizer.history.prometheus import (
    PrometheusQuery,
    job_of_pod,
    parse_prometheus_spec,
    read_prometheus,
)
from optimizer.history.sources import read_history

EXECUTIONS = [f"d{i:03d}" for i in range(12)] + ["d015"]
RERUN = "d015"
"""Runs under d010's pod name after a gap of more than five minutes, as a StatefulSet's or a
training operator's pod does when its job runs again."""
GAP_S = 60.0
RAND = "bcdfghjklmnpqrstvwxz2456789"


def _suffix(seed: str, n: int) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(RAND[b % len(RAND)] for b in digest[:n])


def _pod_name(exec_id: str, workload: str, i: int) -> str:
    """Pods named as Kubernetes' controllers name them, a different controller by turn."""
    job = workload.replace("_", "-")
    return [f"{job}-{_suffix(exec_id, 5)}",                               # Job
            f"{job}-{_suffix(exec_id, 9)}-{_suffix(exec_id + 'p', 5)}",   # Deployment
            f"{job}-worker-{i % 3}",                                      # PyTorchJob
            f"{job}-{i % 4}-{_suffix(exec_id, 5)}"][i % 4]                # indexed Job


def _traces(shared_data: Path) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    rows = defaultdict(list)
    with (shared_data / "dl-traces" / "traces.csv").open() as f:
        for row in csv.DictReader(f):
            if row["exec_id"] in EXECUTIONS:
                rows[row["exec_id"]].append(row)
    with (shared_data / "dl-traces" / "executions.csv").open() as f:
        executions = {r["exec_id"]: r for r in csv.DictReader(f) if r["exec_id"] in EXECUTIONS}
    return rows, executions


def _openmetrics(rows, executions, base: float) -> tuple[str, dict[str, dict]]:
    """OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics``, and per pod what
    the traces say (start, peak memory, CPU p95), by run id less the namespace."""
    cpu, mem, owner, requests, limits = [], [], [], [], []
    placed, start = {}, base
    for i, exec_id in enumerate(EXECUTIONS):
        samples = rows[exec_id]
        pod = _pod_name(exec_id, executions[exec_id]["workload"], i)
        if exec_id == RERUN:
            pod = _pod_name("d010", "mlp_tabular", 10)
            start += 400.0
        labels = f'namespace="ml",pod="{pod}",container="trainer"'
        counter, prev = 0.0, 0.0
        for r in samples:
            t = float(r["time_s"])
            counter += float(r["cpu_cores"]) * (t - prev)
            prev = t
            cpu.append(f"container_cpu_usage_seconds_total{{{labels}}} {counter:.6f} "
                       f"{start + t:.3f}")
            mem.append(f"container_memory_working_set_bytes{{{labels}}} "
                       f"{float(r['mem_gb']) * 2**30:.0f} {start + t:.3f}")
        end = start + float(samples[-1]["time_s"])
        owned = i % 4 == 0 and exec_id != RERUN
        if owned:  # kube-state-metrics for every fourth pod, scraped every 5 s
            for t in np.arange(start, end, 5.0):
                owner.append(f'kube_pod_owner{{namespace="ml",pod="{pod}",owner_kind="Job",'
                             f'owner_name="owned-{exec_id}"}} 1 {t:.3f}')
                requests.append(f'kube_pod_container_resource_requests{{{labels},resource="cpu",'
                                f'unit="core"}} {executions[exec_id]["threads"]} {t:.3f}')
                limits.append(f'kube_pod_container_resource_limits{{{labels},resource="memory",'
                              f'unit="byte"}} {2 * 2**30} {t:.3f}')
        cores = [float(r["cpu_cores"]) for r in samples]
        placed[pod + ("#2" if exec_id == RERUN else "")] = {
            "exec_id": exec_id, "start": start + float(samples[0]["time_s"]),
            "peak_mem_gb": max(float(r["mem_gb"]) for r in samples),
            "cpu_p95": float(np.quantile(cores, 0.95)),
            "wall_s": float(samples[-1]["time_s"]) - float(samples[0]["time_s"]),
            "owned": owned, "threads": float(executions[exec_id]["threads"])}
        start = end + GAP_S
    text = ["# TYPE container_cpu_usage_seconds counter", *cpu,
            "# TYPE container_memory_working_set_bytes gauge", *mem,
            "# TYPE kube_pod_owner gauge", *owner,
            "# TYPE kube_pod_container_resource_requests gauge", *requests,
            "# TYPE kube_pod_container_resource_limits gauge", *limits, "# EOF"]
    return "\n".join(text) + "\n", placed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prom(tmp_path_factory, shared_data):
    """A Prometheus on loopback over the backfilled traces: (url, pods, first, last)."""
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not (prometheus and promtool):
        missing("Prometheus", "Debian: apt-get install prometheus")
    tmp = tmp_path_factory.mktemp("prom")
    rows, executions = _traces(shared_data)
    base = float(int(time.time()) - 3 * 3600)  # well inside the 15-day retention
    text, placed = _openmetrics(rows, executions, base)
    (tmp / "traces.om").write_text(text)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "traces.om"),
                    str(tmp / "tsdb")], check=True, capture_output=True, timeout=60)
    (tmp / "prometheus.yml").write_text("scrape_configs: []\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with (tmp / "prometheus.log").open("w") as log:
        server = subprocess.Popen(
            [prometheus, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Prometheus did not start: {(tmp / 'prometheus.log').read_text()}")
            time.sleep(0.1)
        last = max(p["start"] + p["wall_s"] for p in placed.values())
        yield url, placed, base, last + 5
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_each_pod_reads_back_as_its_trace(prom):
    url, placed, first, last = prom
    history = read_prometheus(PrometheusQuery(url, '{namespace="ml"}', first, last, step_s=1.0))
    assert {r.run_id for r in history} == {f"ml/{key}" for key in placed}
    for run in history:
        trace = placed[run.run_id.removeprefix("ml/")]
        assert run.run_id.startswith(f"ml/{run.tags['pod']}") and run.source == f"prometheus:{url}"
        # max_over_time over windows that tile the range keeps every scrape's memory
        assert run.value("peak_mem_gb") == pytest.approx(trace["peak_mem_gb"], rel=1e-6)
        # a 2 s rate averages four 0.5 s samples, which lowers the p95 by 0.3-2% here
        assert run.value("cpu_p95_cores") == pytest.approx(trace["cpu_p95"], rel=0.05, abs=0.02)
        assert run.value("wall_s") == pytest.approx(trace["wall_s"], abs=2.5)
        assert run.started_at == pytest.approx(trace["start"], abs=2.5)
    assert [r.run_id for r in history] == [f"ml/{key}" for key in
                                           sorted(placed, key=lambda p: placed[p]["start"])]
    rerun = [r for r in history if r.tags["pod"] == _pod_name("d010", "mlp_tabular", 10)]
    assert [r.run_id.endswith("#2") for r in rerun] == [False, True]
    assert rerun[1].started_at - rerun[0].started_at > 400


def test_jobs_come_from_owners_or_pod_names(prom):
    url, placed, first, last = prom
    history = read_prometheus(PrometheusQuery(url, '{namespace="ml"}', first, last, step_s=1.0))
    for run in history:
        trace = placed[run.run_id.removeprefix("ml/")]
        if trace["owned"]:
            assert run.job == f"owned-{trace['exec_id']}"
            assert run.params == {"cpus": trace["threads"], "memory_gb": 2.0}
        else:
            assert run.params == {}
            assert run.job in ("mlp-tabular", "cnn-images", "transformer-seq",
                               "autoencoder-stream", "mlp-workers")
    unowned = [r for r in history if not placed[r.run_id.removeprefix("ml/")]["owned"]]
    assert len({r.job for r in unowned}) == 5  # the five workloads, whichever controller


def test_a_selector_narrows_and_a_long_range_is_read_in_pieces(prom):
    url, placed, first, last = prom
    query = PrometheusQuery(url, '{namespace="ml",pod=~"cnn-images-.*"}', first, last,
                            step_s=1.0)
    whole = read_prometheus(query)
    assert {r.job for r in whole} == {"cnn-images"} and len(whole) == 3
    pieces = read_prometheus(query, max_points=97)
    for a, b in zip(whole, pieces, strict=True):
        assert np.array_equal(a.usage.time_s, b.usage.time_s)
        assert np.allclose(a.usage.mem_gb, b.usage.mem_gb)
        assert np.allclose(a.usage.cpu_cores, b.usage.cpu_cores)


def test_the_dispatcher_reads_a_spec(prom):
    url, placed, first, last = prom
    host = url.removeprefix("http://")
    spec = (f'prometheus+http://{host}?selector={{namespace="ml",pod=~"mlp-.+"}}'
            f"&start={first:.0f}&end={last:.0f}&step=2s")
    history = read_history(spec)
    assert history.jobs() == ["mlp-tabular", "mlp-workers", "owned-d000", "owned-d004"]
    assert all(r.usage.time_s[1] - r.usage.time_s[0] == pytest.approx(2.0) for r in history)


def test_a_selector_matching_nothing_names_what_exists(prom):
    url, placed, first, last = prom
    with pytest.raises(HistoryError) as e:
        read_prometheus(PrometheusQuery(url, '{namespace="prod"}', first, last, step_s=1.0))
    message = str(e.value)
    assert '{namespace="prod"} matches no container_memory_working_set_bytes' in message
    assert "namespaces there: ml" in message and "cnn-images-" in message
    assert "\n" not in message


def test_a_range_without_samples_says_so(prom):
    url, placed, first, last = prom
    with pytest.raises(HistoryError, match=r"matches pod\(s\) .* but none has .* samples between"):
        read_prometheus(PrometheusQuery(url, '{namespace="ml"}', first - 7200, first - 3600))
    with pytest.raises(HistoryError, match="range is empty: start .* is not before end"):
        PrometheusQuery(url, "{}", last, first)


def test_a_step_below_the_scrape_interval_gets_advice(prom):
    url, placed, first, last = prom
    with pytest.raises(HistoryError, match="no CPU rate over 0.2 s windows; give a step"):
        read_prometheus(PrometheusQuery(url, '{namespace="ml"}', first, first + 120,
                                        step_s=0.1))


def test_a_bad_selector_is_the_servers_word(prom):
    url, placed, first, last = prom
    with pytest.raises(HistoryError, match="is not a PromQL label selector"):
        read_prometheus(PrometheusQuery(url, 'namespace="ml"', first, last))
    with pytest.raises(HistoryError, match=r"rejected /api/v1/query_range .*parse error"):
        read_prometheus(PrometheusQuery(url, '{namespace=ml}', first, last))


def test_an_unreachable_server_is_one_line():
    port = _free_port()
    with pytest.raises(HistoryError) as e:
        read_prometheus(PrometheusQuery(f"http://127.0.0.1:{port}", "{}", 0.0, 60.0))
    assert str(e.value).startswith(f"Prometheus at 127.0.0.1:{port}: connection refused")


def test_spec_parsing():
    q = parse_prometheus_spec('prometheus+https://prom.example:9090/prom/?selector={pod=~"a+b"}'
                              "&start=now-2h&end=now&step=1m&window=5m", now=10_000.0)
    assert (q.url, q.selector, q.start, q.end, q.step_s, q.window_s) == (
        "https://prom.example:9090/prom", '{pod=~"a+b"}', 2_800.0, 10_000.0, 60.0, 300.0)
    q = parse_prometheus_spec("prometheus+http://h:1?start=2024-05-01T00:00:00Z&end=1714525200")
    assert (q.start, q.end, q.step_s, q.selector) == (1714521600.0, 1714525200.0, 15.0, "{}")
    with pytest.raises(HistoryError, match="unknown argument.*'stpe'"):
        parse_prometheus_spec("prometheus+http://h:1?stpe=1s")
    with pytest.raises(HistoryError, match="step: '1 minute' is not a duration"):
        parse_prometheus_spec("prometheus+http://h:1?step=1 minute")
    with pytest.raises(HistoryError, match="start: 'yesterday' is not a time"):
        parse_prometheus_spec("prometheus+http://h:1?start=yesterday")


@pytest.mark.parametrize("pod,job", [
    ("resnet-7d9f8c6b5-x7k2p", "resnet"), ("resnet-x7k2p", "resnet"),
    ("resnet-3-x7k2p", "resnet"), ("resnet-worker-1", "resnet"), ("resnet-master-0", "resnet"),
    ("resnet-0", "resnet"), ("train-model", "train-model"), ("bert-large", "bert-large"),
    ("mlp-workers-x7k2p", "mlp-workers"), ("solo", "solo")])
def test_job_of_pod_names(pod, job):
    assert job_of_pod(pod) == job


def test_job_of_an_owned_pod():
    assert job_of_pod("web-7d9f8c6b5-x7k2p", "ReplicaSet", "web-7d9f8c6b5") == "web"
    assert job_of_pod("anything-x7k2p", "Job", "nightly-train") == "nightly-train"

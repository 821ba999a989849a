"""Training jobs' container usage from Prometheus (cAdvisor's metrics, kube-state-metrics').

Spec (``--history``)::

    prometheus+http://HOST:PORT[/PREFIX]?selector={namespace="ml",pod=~"train-.*"}&start=now-7d&end=now&step=15s

``prometheus+https://`` for TLS. The query's values are taken as written (no ``+``-for-space
decoding, so a regex keeps its ``+``); write a ``&`` inside the selector as ``%26``. ``start``
and ``end`` are ``now``, ``now-6h``, Unix seconds or RFC 3339 (defaults: ``now-1d`` and
``now``); ``step`` is the resolution (default ``15s``, cAdvisor's usual scrape interval);
``window`` the rate window (default twice the step).

What is read, per pod (``sum by (namespace, pod)`` over its containers, the pause container
and the pod-level cgroup series left out):

- CPU in cores: ``rate(container_cpu_usage_seconds_total[window])``. A rate needs two samples
  in its window, so the step should be at least the scrape interval;
- memory in GiB: ``max_over_time(container_memory_working_set_bytes[step])``, so the windows
  tile the range and the peak of every scrape is kept whatever the step;
- where kube-state-metrics is scraped, the pod's owner (``kube_pod_owner``) and its CPU request,
  GPU request and memory limit (``kube_pod_container_resource_requests``/``_limits``) as the
  run's ``cpus``, ``gpus`` and ``memory_gb``.

Each pod with usage in the range is one :class:`HistoryRun` (``run_id`` ``namespace/pod``). Its
``job`` is the pod's owner: the owner that ``kube_pod_owner`` names (a ReplicaSet's
pod-template hash removed, so it is the Deployment), or else from the pod's name, by the
suffixes Kubernetes' controllers append, removed from the end in this order:

1. the 5-character random suffix of a generated name (``-x7k2p``; Kubernetes draws these from
   consonants and the digits 2, 4–9, so a word such as ``-model`` is not taken for one);
2. after it, a ReplicaSet's pod-template hash (``-7d9f8c6b5``, 6 to 10 such characters);
3. a replica index (``-0``: a StatefulSet's ordinal, an indexed Job's index, a training
   operator's replica number);
4. a training operator's replica role (``-worker``, ``-master``, ``-chief``, ``-ps``,
   ``-evaluator``, ``-launcher``, ``-head``).

So ``resnet-7d9f8c6b5-x7k2p``, ``resnet-x7k2p``, ``resnet-3-x7k2p`` and ``resnet-worker-1``
all belong to job ``resnet``. Samples are joined on the times both series have; a pod's first
window (before its rate has two samples) is left out. A pod whose samples stop for longer than
ten steps and five minutes and then resume (a StatefulSet's or a training operator's pod
names recur across runs) is read as two runs, the later ``namespace/pod#2``.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimizer.foundation.errors import HistoryError
from optimizer.history.prom_api import (
    PrometheusAPI,
    iso,
    parse_duration,
    parse_time,
    promql_duration,
)
from optimizer.history.run import History, HistoryRun, UsageSeries

CPU_METRIC = "container_cpu_usage_seconds_total"
MEM_METRIC = "container_memory_working_set_bytes"
GIB = float(2**30)
MAX_POINTS = 10_000
"""Points per series per range query; Prometheus refuses more than 11,000, so longer ranges
are read in pieces."""

GAP_STEPS, GAP_MIN_S = 10, 300.0
"""A pod's samples further apart than this many steps, and than these seconds, are two runs."""

_RAND = "bcdfghjklmnpqrstvwxz2456789"
_GENERATED = re.compile(rf"-[{_RAND}]{{5}}$")
_POD_HASH = re.compile(rf"-[{_RAND}]{{6,10}}$")
_INDEX = re.compile(r"-\d+$")
_ROLE = re.compile(r"-(worker|master|chief|ps|evaluator|launcher|head)$")


@dataclass(frozen=True)
class PrometheusQuery:
    """What to read: a server, a label selector, a time range and a resolution."""

    url: str
    """The server's base URL, ``http://host:port`` (and a path prefix where it has one)."""
    selector: str
    """A PromQL label selector, ``{namespace="ml",pod=~"train-.*"}``; ``{}`` for every pod."""
    start: float
    end: float
    step_s: float = 15.0
    window_s: float | None = None
    """The rate window; twice the step when None."""

    def __post_init__(self) -> None:
        if not self.start < self.end:
            raise HistoryError(f"Prometheus range is empty: start {iso(self.start)} is not "
                               f"before end {iso(self.end)}")


def parse_prometheus_spec(spec: str, now: float | None = None) -> PrometheusQuery:
    """A :class:`PrometheusQuery` from ``prometheus+http://host:port?selector=...`` (see the
    module docstring)."""
    scheme, sep, rest = spec.partition("://")
    if not sep or scheme not in ("prometheus", "prometheus+http", "prometheus+https"):
        raise HistoryError(f"history spec {spec!r} is not prometheus+http://HOST:PORT?selector=...")
    split = urllib.parse.urlsplit("http://" + rest)
    if not split.netloc:
        raise HistoryError(f"history spec {spec!r} names no HOST:PORT")
    args: dict[str, str] = {}
    for pair in filter(None, split.query.split("&")):
        key, _, value = pair.partition("=")
        args[urllib.parse.unquote(key)] = urllib.parse.unquote(value)
    unknown = sorted(set(args) - {"selector", "start", "end", "step", "window"})
    if unknown:
        raise HistoryError(f"history spec {spec!r}: unknown argument(s) {unknown}; known: "
                           "selector, start, end, step, window")
    http = "https" if scheme == "prometheus+https" else "http"
    window = args.get("window")
    return PrometheusQuery(
        url=f"{http}://{split.netloc}{split.path.rstrip('/')}",
        selector=args.get("selector", "{}"),
        start=parse_time(args.get("start", "now-1d"), "start", now),
        end=parse_time(args.get("end", "now"), "end", now),
        step_s=parse_duration(args.get("step", "15s"), "step"),
        window_s=parse_duration(window, "window") if window else None,
    )


def job_of_pod(pod: str, owner_kind: str | None = None, owner_name: str | None = None) -> str:
    """The job a pod belongs to: its owner where known, else from its name (module docstring)."""
    if owner_name:
        return _POD_HASH.sub("", owner_name) if owner_kind == "ReplicaSet" else owner_name
    name = pod
    if _GENERATED.search(name):
        name = _GENERATED.sub("", name)
        name = _POD_HASH.sub("", name) or name
    name = _INDEX.sub("", name) or name
    return _ROLE.sub("", name) or name


def read_prometheus(query: PrometheusQuery, *, timeout_s: float = 30.0,
                    max_points: int = MAX_POINTS) -> History:
    """Every pod the selector matches with usage in the range, one run each."""
    api = PrometheusAPI(query.url, timeout_s)
    matchers = _matchers(query.selector)
    containers = ",".join(filter(None, [matchers, 'container!=""', 'container!="POD"']))
    step, window = query.step_s, query.window_s or 2 * query.step_s
    mem = _range(api, f"sum by (namespace, pod) (max_over_time({MEM_METRIC}{{{containers}}}"
                      f"[{promql_duration(step)}]))", query, max_points)
    if not mem:
        _explain_nothing(api, query, matchers)
    cpu = _range(api, f"sum by (namespace, pod) (rate({CPU_METRIC}{{{containers}}}"
                      f"[{promql_duration(window)}]))", query, max_points)
    owners = _owners(api, query, matchers)
    settings = _pod_settings(api, query, matchers)
    runs = []
    for key, (mem_t, mem_v) in mem.items():
        if key not in cpu:
            continue
        cpu_t, cpu_v = cpu[key]
        shared, in_mem, in_cpu = np.intersect1d(np.round(mem_t * 1000).astype(np.int64),
                                                np.round(cpu_t * 1000).astype(np.int64),
                                                return_indices=True)
        times, cores, gib = shared / 1000.0, cpu_v[in_cpu], mem_v[in_mem] / GIB
        # a pod name that comes back (a StatefulSet's, a training operator's) after a gap is
        # another run of the job
        gap = max(GAP_STEPS * step, GAP_MIN_S)
        cuts = np.flatnonzero(np.diff(times) > gap) + 1
        namespace, pod = key
        kind, owner = owners.get(key, (None, None))
        for n, (t, c, m) in enumerate(zip(np.split(times, cuts), np.split(cores, cuts),
                                          np.split(gib, cuts), strict=True)):
            if len(t) == 0:
                continue
            runs.append(HistoryRun(
                run_id=f"{namespace}/{pod}" + (f"#{n + 1}" if n else ""),
                job=job_of_pod(pod, kind, owner), source=f"prometheus:{query.url}",
                started_at=float(t[0]), params=settings.get(key, {}),
                usage=UsageSeries(time_s=t - t[0], cpu_cores=c, mem_gb=m),
                tags={"namespace": namespace, "pod": pod}))
    if not runs:
        raise HistoryError(
            f"Prometheus at {api.where}: pods matching {query.selector} have memory samples "
            f"between {iso(query.start)} and {iso(query.end)} but no CPU rate over "
            f"{window:g} s windows; give a step (or window) of at least twice the scrape interval")
    return History.of(runs)


def read_prometheus_spec(spec: str) -> History:
    """:func:`read_prometheus` of a ``prometheus+http://...`` spec."""
    return read_prometheus(parse_prometheus_spec(spec))


def _matchers(selector: str) -> str:
    text = selector.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise HistoryError(f"selector {selector!r} is not a PromQL label selector such as "
                           '{namespace="ml",pod=~"train-.*"}')
    return text[1:-1].strip().rstrip(",")


def _range(api: PrometheusAPI, promql: str, query: PrometheusQuery,
           max_points: int) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """``query_range`` of ``promql`` by (namespace, pod), in pieces of ``max_points``."""
    pieces: dict[tuple[str, str], list[list[Any]]] = {}
    start = query.start
    while start <= query.end:
        end = min(query.end, start + (max_points - 1) * query.step_s)
        data = api.get("query_range", {"query": promql, "start": f"{start:.3f}",
                                       "end": f"{end:.3f}", "step": f"{query.step_s:g}"})
        for series in data.get("result", []):
            labels = series["metric"]
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            pieces.setdefault(key, []).extend(series["values"])
        start = end + query.step_s
    out = {}
    for key, values in pieces.items():
        times = np.array([float(t) for t, _ in values])
        numbers = np.array([float(v) for _, v in values])
        keep = np.isfinite(numbers)
        out[key] = (times[keep], numbers[keep])
    return out


def _owners(api: PrometheusAPI, query: PrometheusQuery,
            matchers: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(namespace, pod) -> (owner kind, owner name) from kube-state-metrics, where scraped."""
    series = api.get("series", [("match[]", f"kube_pod_owner{{{matchers}}}"),
                                ("start", f"{query.start:.3f}"), ("end", f"{query.end:.3f}")])
    return {(s.get("namespace", ""), s.get("pod", "")): (s.get("owner_kind", ""),
                                                          s.get("owner_name", ""))
            for s in series if s.get("owner_name") not in (None, "", "<none>")}


def _pod_settings(api: PrometheusAPI, query: PrometheusQuery,
                  matchers: str) -> dict[tuple[str, str], dict[str, float]]:
    """Each pod's CPU and GPU request and memory limit (kube-state-metrics), at their largest
    over the range."""
    span = promql_duration(query.end - query.start)
    wanted = {("requests", "cpu"): ("cpus", 1.0), ("requests", "nvidia_com_gpu"): ("gpus", 1.0),
              ("limits", "memory"): ("memory_gb", 1 / GIB)}
    settings: dict[tuple[str, str], dict[str, float]] = {}
    for kind in ("requests", "limits"):
        data = api.get("query", {
            "query": f"sum by (namespace, pod, resource) (max_over_time("
                     f"kube_pod_container_resource_{kind}{{{matchers}}}[{span}]))",
            "time": f"{query.end:.3f}"})
        for series in data.get("result", []):
            labels = series["metric"]
            name_scale = wanted.get((kind, labels.get("resource", "")))
            if name_scale is not None:
                key = (labels.get("namespace", ""), labels.get("pod", ""))
                name, scale = name_scale
                settings.setdefault(key, {})[name] = float(series["value"][1]) * scale
    return settings


def _few(values: list[str], n: int = 5) -> str:
    shown = ", ".join(values[:n])
    return shown + (f", ... ({len(values)} in all)" if len(values) > n else "")


def _explain_nothing(api: PrometheusAPI, query: PrometheusQuery, matchers: str) -> None:
    """Raise the one line that says why the selector found no usage in the range."""
    anywhere = api.get("series", [("match[]", f"{MEM_METRIC}{{{matchers}}}")])
    if anywhere:
        pods = sorted({s.get("pod", "?") for s in anywhere})
        raise HistoryError(
            f"Prometheus at {api.where}: selector {query.selector} matches pod(s) {_few(pods)}, "
            f"but none has {MEM_METRIC} samples between {iso(query.start)} and {iso(query.end)}")
    namespaces = api.label_values("namespace", MEM_METRIC)
    if not namespaces:
        raise HistoryError(f"Prometheus at {api.where} has no {MEM_METRIC} series at all "
                           "(is cAdvisor, the kubelet's /metrics/cadvisor, scraped?)")
    pods = api.label_values("pod", MEM_METRIC)
    raise HistoryError(f"Prometheus at {api.where}: selector {query.selector} matches no "
                       f"{MEM_METRIC} series; namespaces there: {_few(namespaces)}; "
                       f"pods: {_few(pods)}")

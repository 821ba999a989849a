"""Run records: the trial summary schema and a run's trial folders.

A run lives in ``runs/<run>/``; each measured configuration is a trial in
``runs/<run>/trials/<trial>/`` with ``config.json`` (the allocation), ``trace.csv`` (the
monitor's samples), ``metrics.csv`` (what the script reported, if anything), ``stdout.log``,
``stderr.log`` and ``summary.json`` (a :class:`TrialSummary`). Every file is written to a
temporary name in the same directory and renamed into place, so a crash never leaves a
half-written record (:mod:`optimizer.foundation.atomic_files`): a trial folder with a ``summary.json`` is
complete.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import atomic_write_csv, atomic_write_json, read_json
from optimizer.foundation.errors import CloudoptError

SUMMARY_FILE = "summary.json"


@dataclass
class TrialSummary:
    """What one trial measured. Figures are measured unless named ``predicted_*``."""

    trial_id: str
    status: str
    """``completed`` (the script ended by itself), ``probe`` (stopped at the time box after a
    steady measurement) or ``failed``."""
    allocation: Allocation = field(default_factory=Allocation)
    reason: str = ""
    """Why a trial failed: ``crash``, ``oom``, ``timeout``, ``no-progress``..."""
    exit_code: int | None = None
    wall_time_s: float = 0.0
    samples: float | None = None
    """Training samples processed during the trial."""
    throughput: float | None = None
    """Samples per second."""
    throughput_source: str = "none"
    """The first of: ``metrics_csv`` (rows the script wrote for cloudopt), ``probe`` (the
    in-process probe's optimizer steps), ``stdout`` (printed rates) and ``wall_time``."""
    hourly_cost: float = 0.0
    cost: float = 0.0
    """Cost of the trial itself (hourly cost × wall time)."""
    total_samples: float | None = None
    """Work of the whole job, when known (argument, metrics or --total-samples)."""
    predicted_total_time_s: float | None = None
    predicted_total_cost: float | None = None
    startup_s: float | None = None
    """Seconds before the steady rate began (start-up the whole job pays once), kept so that a
    probe measured before the job's size was known can predict the job once it is
    (:func:`with_job_size`)."""
    exit_s: float | None = None
    """Seconds of a whole run's wall time after its last training step: the final
    evaluation (and, for a compiled model, the compile of its inference graph: 3.6 to 5.5 s
    of torch.compile'd ResMLP's 21 to 31 s), the interpreter's start before the probe's
    first event and its exit (freeing a large model, torch's own shutdown: 0.53 to 0.73 s on
    the suite's scripts). A completed trial measures it; a stopped probe never gets there, so
    it is given the median of the completed trials beside it, those with as many CPUs where
    there are any (:func:`exit_seconds`), which its predicted job time includes. Without it,
    a whole run looks slower than a probe of the same speed stopped short of its end."""
    cpu_cores_mean: float = 0.0
    cpu_cores_peak: float = 0.0
    cpu_util_mean: float = 0.0
    """Mean CPU use as a percentage of the allocated cores."""
    mem_gb_mean: float = 0.0
    mem_gb_peak: float = 0.0
    mem_gb_growth: float | None = None
    """GB per second the memory rose over the run's steady part (0.0: flat within noise;
    None: too few samples, or recorded before it was measured). A probe's peak is what the
    job needs at least: this is how much more it may reach by the end of the job
    (:mod:`optimizer.search.memory_need`, :func:`optimizer.trials.monitor.memory_growth_rate`)."""
    gpu_util_mean: float | None = None
    gpu_mem_gb_peak: float | None = None
    n_samples_trace: int = 0
    train_file: str = ""
    train_args: list[str] = field(default_factory=list)
    model_info: dict[str, Any] = field(default_factory=dict)
    """What the script's source or metrics reveal: model family, parameters, dataset..."""
    stderr_tail: str = ""
    started_at: str = ""
    finished_at: str = ""
    executor: str = "local"
    """Where the trial ran: ``local`` (a subprocess of the optimizer) or ``ray``."""
    node: str = ""
    """The machine it ran on (host name), for telling which trials shared one."""
    concurrent_with: list[str] = field(default_factory=list)
    """Trials that ran on the same machine at the same time (they share caches and memory
    bandwidth, so their throughputs may be lower than alone)."""
    job_size_source: str = ""
    """Where ``total_samples`` came from: ``given``, ``metrics``, ``printed``, ``arguments``,
    ``probe: dataset x epochs`` or ``probe: completed run``; empty when unknown."""
    probe: dict[str, Any] = field(default_factory=dict)
    """What the in-process probe saw (:mod:`optimizer.trials.probe`; empty for a script that
    never imported torch, or with the probe off): ``steps``, ``samples_per_step``,
    ``dataset_len``, ``train_epochs``, ``epochs`` (and ``epochs_source``), ``loss_first``,
    ``loss_last``, ``printed_throughput`` (a rate the script printed; ``printed_gap``, its
    relative difference from the probe's rate over the same ``printed_windows``, which is
    ``probe_same_windows``; ``printed_gap_steady``, from the probe's steady rate), ``errors``."""

    live: dict[str, Any] = field(default_factory=dict)
    """A trial whose allocation a controller changed while it ran
    (:mod:`optimizer.trials.live`): ``decider``, ``changes``, ``phases_seen``, ``timeline``
    (``[t, cpus, memory_gb]`` from each change on), ``cpu_seconds``, ``gb_seconds``,
    ``error``; its ``cost`` is billed per interval at the allocation held. Empty otherwise."""

    history: dict[str, Any] = field(default_factory=dict)
    """A measurement read from an earlier run (``--history``), never a run of this search:
    ``source`` (where it was read) and ``run_id`` (the run there), ``job``; it lives in
    ``runs/<run>/history/<trial>/`` and no budget counts it. Empty for a real run."""

    @property
    def ok(self) -> bool:
        return self.status in ("completed", "probe")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> TrialSummary:
        """A summary from its JSON form; every field's type is checked (CloudoptError naming
        ``source`` and the field), so a bad record fails here and not deep in a fit."""
        if not isinstance(data, dict):
            raise CloudoptError(f"{source}: not a trial summary (a JSON object is expected, "
                                f"got {type(data).__name__})")
        data = dict(data)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        extra = sorted(set(data) - set(fields))
        if extra:
            warnings.warn(f"{source}: ignoring unknown summary keys {extra}", stacklevel=2)
        alloc = data.pop("allocation", {}) or {}
        if not isinstance(alloc, dict):
            raise CloudoptError(f"{source}: 'allocation' must be an object, got {alloc!r}")
        for name, value in alloc.items():
            kind = {"gpus": "int", "cpus": "int", "memory_gb": "float",
                    "batch_size": "int | None", "workers": "int | None"}.get(name)
            if kind is not None:
                _check_type(value, kind, f"allocation.{name}", source)
        kwargs = {k: v for k, v in data.items() if k in fields}
        for name, value in kwargs.items():
            _check_type(value, str(fields[name].type), name, source)
        try:
            return cls(allocation=Allocation(**alloc), **kwargs)
        except TypeError as exc:
            raise CloudoptError(f"{source}: not a trial summary ({exc})") from None

    def save(self, trial_dir: str | os.PathLike) -> None:
        atomic_write_json(Path(trial_dir) / SUMMARY_FILE, self.to_dict())

    @classmethod
    def load(cls, trial_dir: str | os.PathLike) -> TrialSummary:
        path = Path(trial_dir) / SUMMARY_FILE
        return cls.from_dict(read_json(path), source=str(path))


def _check_type(value: Any, annotation: str, name: str, source: str) -> None:
    """Raise CloudoptError unless ``value`` fits the field's (string) annotation."""
    if value is None and "None" in annotation:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    base = annotation.split("|")[0].strip()
    ok = {"str": isinstance(value, str), "int": number and float(value).is_integer(),
          "float": number}.get(base)
    if ok is None:
        ok = isinstance(value, list) if base.startswith("list") else (
            isinstance(value, dict) if base.startswith("dict") else True)
    if not ok:
        raise CloudoptError(f"{source}: field {name!r} must be {annotation}, got {value!r}")


def set_aside(trial_dir: Path) -> Path:
    """Move a trial folder that no longer applies to ``<run>/replaced/`` (a free name there,
    never over an earlier one); returns where it went."""
    keep = trial_dir.parent.parent / "replaced" / trial_dir.name
    n = 1
    while keep.exists():
        keep, n = keep.with_name(f"{trial_dir.name}.{n}"), n + 1
    keep.parent.mkdir(parents=True, exist_ok=True)
    trial_dir.rename(keep)
    return keep


HISTORY_DIR = "history"
"""The run folder's folder of measurements read from history (:attr:`TrialSummary.history`)."""


def iter_trials(run_dir: str | os.PathLike, folder: str = "trials") -> Iterator[TrialSummary]:
    """Complete trials of a run, in trial-folder order (folders without a summary are skipped);
    ``folder`` :data:`HISTORY_DIR`: the measurements read from history instead."""
    trials = Path(run_dir) / folder
    if not trials.is_dir():
        return
    for d in sorted(p for p in trials.iterdir() if p.is_dir()):
        if (d / SUMMARY_FILE).exists():
            yield TrialSummary.load(d)


def trial_files(run_dir: str | os.PathLike, t: TrialSummary) -> Path:
    """The folder of ``t``'s files (probe events, loss target): ``trials/<id>``, or
    ``history/<id>`` for a measurement read from history."""
    return Path(run_dir) / (HISTORY_DIR if t.history else "trials") / t.trial_id


def job_time(t: TrialSummary) -> float | None:
    """Whole-job time of a trial: measured when it completed, predicted for a probe."""
    if t.status == "completed":
        return t.wall_time_s
    return t.predicted_total_time_s


def predict_time(status: str, wall: float, samples: float | None, total: float | None,
                 thr: float | None, startup: float | None, exit_s: float | None = None
                 ) -> float | None:
    """Whole-job time: measured when the script ran to its end, else predicted (start-up,
    the job at the steady rate, and the process's exit, :attr:`TrialSummary.exit_s`)."""
    if status == "completed":
        if total is None or samples is None or samples >= total or not thr:
            return round(wall, 3)
        return round(wall + (total - samples) / thr, 3)
    if status == "probe" and thr and total is not None:
        return round((startup or 0.0) + total / thr + (exit_s or 0.0), 3)
    return None


def exit_seconds(status: str, wall: float, probe_end: float | None,
                 trials_dir: str | os.PathLike, cpus: int | None = None) -> float | None:
    """:attr:`TrialSummary.exit_s` of a trial that just ended: a completed run's wall time
    past its last training step (``probe_end``, on the probe's clock, which starts with the
    script); for a probe, the median over the completed trials recorded in ``trials_dir``
    with ``cpus`` CPUs, else over all of them (None before the first: :func:`with_job_size`
    gives it to such probes later)."""
    if status == "completed":
        return None if probe_end is None else round(max(wall - probe_end, 0.0), 3)
    if status != "probe":
        return None
    seen: list[tuple[int | None, float]] = []
    for path in sorted(Path(trials_dir).glob(f"*/{SUMMARY_FILE}")):
        try:
            s = read_json(path)
        except (CloudoptError, OSError):
            continue  # a record being written, or not ours: it only narrows the median
        if isinstance(s, dict) and s.get("status") == "completed" and \
                isinstance(s.get("exit_s"), (int, float)):
            seen.append(((s.get("allocation") or {}).get("cpus"), float(s["exit_s"])))
    return _median_exit(seen, cpus)


def _median_exit(seen: Sequence[tuple[int | None, float]], cpus: int | None) -> float | None:
    """The median exit of those with ``cpus`` CPUs, else of all: the work after the last
    step (an evaluation, a compile) runs on the trial's cores (torch.compile'd ResMLP's:
    5.0 s on 1 CPU, 3.6 s on 2)."""
    same = [e for c, e in seen if cpus is not None and c == cpus]
    pool = same or [e for _, e in seen]
    return round(statistics.median(pool), 3) if pool else None


def with_job_size(trials: Sequence[TrialSummary], total: float | None,
                  found_by: Sequence[TrialSummary] = ()) -> list[TrialSummary]:
    """``trials`` with the whole job of ``total`` samples predicted for every probe that ran
    before any trial knew the job's size (a script that neither prints its size nor shows it
    to the probe: a later whole run, or a probe that reached the job's end, finds it). Left
    without a prediction, such probes drop out of every comparison of whole jobs, and the
    final choice sees only the trials measured after the size was found. ``found_by``: the
    trials to name as the size's source (default ``trials``).

    Probes that ran before any whole run measured the process's exit (:attr:`TrialSummary.
    exit_s`) are given the median of those in ``found_by`` and ``trials`` here, so that every
    probe's job time counts it once a whole run is among them."""
    source = next((t.trial_id for t in (found_by or trials) if t.total_samples), "a trial")
    exits = [(t.allocation.cpus, t.exit_s) for t in [*found_by, *trials]
             if t.status == "completed" and t.exit_s is not None]
    out = [probe_job(t, total, f"learned from {source}") if total else t for t in trials]
    return [with_exit(t, _median_exit(exits, t.allocation.cpus)) for t in out] if exits \
        else out


def with_exit(t: TrialSummary, exit_s: float) -> TrialSummary:
    """``t`` with the process's exit added to its predicted job time, where ``t`` is a probe
    whose prediction has none yet; other trials as they are."""
    if t.status != "probe" or t.exit_s is not None or t.predicted_total_time_s is None:
        return t
    predicted = round(t.predicted_total_time_s + exit_s, 3)
    return dataclasses.replace(t, exit_s=round(exit_s, 3), predicted_total_time_s=predicted,
                               predicted_total_cost=t.hourly_cost * predicted / 3600)


def probe_job(t: TrialSummary, total: float, source: str) -> TrialSummary:
    """``t`` with the whole job of ``total`` samples predicted, where ``t`` is a probe that
    predicted nothing. Without a recorded start-up, the probe's own wall time beyond its
    steady samples counts as start-up (an upper bound: it includes the stop at the time box).
    Other trials are returned as they are."""
    if t.status != "probe" or t.predicted_total_time_s is not None or not t.throughput \
            or not total:
        return t
    startup = t.startup_s
    if startup is None:
        startup = max(t.wall_time_s - (t.samples or 0.0) / t.throughput, 0.0)
    predicted = predict_time("probe", t.wall_time_s, t.samples, float(total), t.throughput,
                             startup, t.exit_s)
    return dataclasses.replace(t, total_samples=float(total), predicted_total_time_s=predicted,
                               predicted_total_cost=t.hourly_cost * predicted / 3600,
                               job_size_source=source)


def job_cost(t: TrialSummary) -> float | None:
    if t.status == "completed":
        return t.cost
    return t.predicted_total_cost


def job_size(trials: Sequence[TrialSummary]) -> float | None:
    """Samples of the whole job: the largest ``total_samples`` a trial reported, else the
    samples of a trial that ran to its end; None when neither is known."""
    reported = max((t.total_samples or 0) for t in trials) if trials else 0
    if reported:
        return float(reported)
    whole = [t.samples for t in trials if t.status == "completed" and t.samples]
    return float(max(whole)) if whole else None


MODEL_INFO_COLUMNS = ("model_name", "model_family", "params", "layers", "dataset")
TRIALS_CSV = "trials.csv"


def summaries_to_frame(summaries: Iterable[TrialSummary | dict[str, Any]]) -> Any:
    """One row per trial: the summary's scalar fields, the allocation as ``gpus, cpus,
    memory_gb, batch_size`` and ``model_info`` as ``model_name, model_family, params, layers,
    dataset``; ``train_args`` is joined into one string and ``stderr_tail`` left out.

    Returns a pandas DataFrame of shape (n_trials, n_columns), columns in a fixed order.
    """
    import pandas as pd

    fields = [f.name for f in dataclasses.fields(TrialSummary)]
    alloc_fields = [f.name for f in dataclasses.fields(Allocation)]
    rows = []
    for s in summaries:
        d = s.to_dict() if isinstance(s, TrialSummary) else TrialSummary.from_dict(s).to_dict()
        alloc = d.pop("allocation") or {}
        info = d.pop("model_info") or {}
        d.pop("probe", None)
        d.pop("live", None)
        d.pop("stderr_tail", None)
        history = d.pop("history", None) or {}
        d["history_source"], d["history_run"] = history.get("source"), history.get("run_id")
        d["train_args"] = " ".join(str(a) for a in d.get("train_args") or [])
        d["concurrent_with"] = " ".join(d.get("concurrent_with") or [])
        row = {"trial_id": d.pop("trial_id"), "status": d.pop("status")}
        row.update({k: alloc.get(k) for k in alloc_fields})
        row.update(d)
        row.update({k: info.get(k) for k in MODEL_INFO_COLUMNS})
        rows.append(row)
    columns = ["trial_id", "status", *alloc_fields,
               *[f for f in fields if f not in ("trial_id", "status", "allocation",
                                                "model_info", "stderr_tail", "live",
                                                "history")],
               *MODEL_INFO_COLUMNS, "history_source", "history_run"]
    frame = pd.DataFrame(rows, columns=columns)
    # Integer columns with gaps stay integers (batch size 64, not 64.0).
    for col in ("gpus", "cpus", "batch_size", "exit_code", "n_samples_trace", "params", "layers"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    return frame


def write_trials_csv(run_dir: str | os.PathLike) -> Path:
    """Rewrite ``runs/<run>/trials.csv`` (atomically) from the run's complete trials, then the
    measurements read from history (``history_source`` and ``history_run`` say where from)."""
    path = Path(run_dir) / TRIALS_CSV
    atomic_write_csv(path, summaries_to_frame([*iter_trials(run_dir),
                                               *iter_trials(run_dir, HISTORY_DIR)]))
    return path


def choose_job_size(sizes: list[tuple[str, float | None]], status: str, thr: float | None,
                    source: str, wall: float, startup: float | None
                    ) -> tuple[str, float | None]:
    """``(where from, samples)`` of the job's size: the first of ``sizes`` (given, the
    script's metrics, printed, arguments, the probe) that has a value; for a whole run with a
    printed rate, rate × run time; for a whole run that counted nothing, one job (whole runs
    then compare by their wall time and cost)."""
    sizes = list(sizes)
    if status == "completed" and thr and source == "stdout":
        sizes.append(("printed rate × run time", thr * max(wall - (startup or 0.0), 0.0)))
    found = next(((k, float(v)) for k, v in sizes if v), None)
    if found is not None:
        return found
    if status == "completed" and thr is None and wall > 0:
        return "one whole run (its samples unknown)", 1.0
    return "", None


"""Reports of an offline log analysis: ``analysis.md``/``.html``, ``analysis.json`` and plots.

:func:`write_analysis` renders what :class:`~optimizer.offline.analyzer.OfflineDataAnalyzer` found: the
per-model table, the best measured configuration per preference, the SLA forecast from the
history (:meth:`~optimizer.foundation.config.SLAConfig.forecast_sla_values`), right-sized
requests for each job's next run beside KRR's and the VPA's, an optional prediction for a new
job (with intervals) and the predictor's leave-one-out accuracy, and two figures: time against cost per configuration, and throughput against
CPU threads and GPUs (batch size where no run used a GPU).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from optimizer.foundation.atomic_files import atomic_write_bytes, atomic_write_json
from optimizer.foundation.errors import CloudoptError  # noqa: E402
from optimizer.offline.analyzer import (  # noqa: E402
    PREFERENCES,
    OfflineDataAnalyzer,
    ResourcePrediction,
)
from optimizer.offline.prediction import interval_label  # noqa: E402
from optimizer.offline.requests import sizing_table  # noqa: E402
from optimizer.reports.render import Report  # noqa: E402

TABLE_COLUMNS = ("model", "runs", "configs", "params", "mean_time_s", "mean_cost",
                 "mean_throughput", "max_throughput", "peak_mem_gb")


def model_table(analysis: dict[str, Any]) -> pd.DataFrame:
    """The per-model table of :meth:`OfflineDataAnalyzer.analyze_all_logs`, report columns."""
    models = analysis["models"]
    return models[[c for c in TABLE_COLUMNS if c in models]]


def best_table(analysis: dict[str, Any]) -> pd.DataFrame:
    """One row per model and preference: the best measured configuration."""
    rows = []
    for model, prefs in analysis["best"].items():
        for pref in PREFERENCES:
            b = prefs[pref]
            rows.append({"model": model, "preference": pref, **b["configuration"],
                         "throughput": b["throughput"], "time_s": b["time_s"],
                         "cost": b["cost"]})
    return pd.DataFrame(rows)


def sla_forecasts(analyzer: OfflineDataAnalyzer) -> dict[str, dict[str, float]]:
    """SLA forecast of the whole history (``"all"``) and of each model with two runs or more."""
    out = {"all": analyzer.forecast_sla()}
    for key, info in analyzer.model_characteristics.items():
        if info["runs"] >= 2:
            try:
                out[key] = analyzer.forecast_sla(key)
            except CloudoptError:
                continue  # a model whose runs log neither time, cost nor throughput
    return out


def _config_label(row: pd.Series) -> str:
    parts = []
    if row["gpus"] > 0:
        parts.append(f"g{row['gpus']:.0f}")
    if np.isfinite(row["cpus"]):
        parts.append(f"c{row['cpus']:.0f}")
    if np.isfinite(row["batch_size"]):
        parts.append(f"b{row['batch_size']:.0f}")
    return " ".join(parts)


def _per_config(data: pd.DataFrame) -> pd.DataFrame:
    keys = ["model_key", "gpus", "cpus", "batch_size"]
    frame = data[keys + ["time_s", "cost", "throughput"]].copy()
    frame[keys[1:]] = frame[keys[1:]].fillna(-1)
    agg = frame.groupby(keys, as_index=False).mean()
    agg[keys[1:]] = agg[keys[1:]].replace(-1, np.nan)
    return agg


def plot_time_vs_cost(data: pd.DataFrame, path: Path) -> Path:
    """Mean time and cost of each (model, configuration), one colour per model."""
    agg = _per_config(data).dropna(subset=["time_s", "cost"])
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for key, g in agg.groupby("model_key"):
        ax.scatter(g["time_s"], g["cost"], label=str(key), s=30)
        if len(agg) <= 40:
            for _, row in g.iterrows():
                ax.annotate(_config_label(row), (row["time_s"], row["cost"]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("wall time (s, mean per configuration)")
    ax.set_ylabel("cost ($, mean per configuration)")
    ax.set_title("Time vs cost per configuration")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def plot_throughput_scaling(data: pd.DataFrame, path: Path) -> Path:
    """Throughput against CPU threads, and against GPUs (or batch size without GPUs)."""
    second = "gpus" if (data["gpus"].fillna(0) > 0).any() else "batch_size"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, x in zip(axes, ("cpus", second), strict=True):
        for key, g in data.dropna(subset=[x, "throughput"]).groupby("model_key"):
            mean = g.groupby(x)["throughput"].mean()
            ax.plot(mean.index, mean.to_numpy(), marker="o", label=str(key))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel({"cpus": "CPU threads", "gpus": "GPUs", "batch_size": "batch size"}[x])
        ax.set_ylabel("throughput (samples/s, mean)")
    axes[0].set_title("Throughput vs threads")
    axes[1].set_title(f"Throughput vs {'GPUs' if second == 'gpus' else 'batch size'}")
    axes[1].legend(fontsize=7, ncol=2)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    import io

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _prediction_rows(pred: ResourcePrediction) -> list[dict[str, Any]]:
    a = pred.allocation
    level = pred.interval_level
    return [
        {"quantity": "allocation", "value": f"{a.gpus} GPU, {a.cpus} CPU, {a.memory_gb:g} GB, "
                                            f"batch {a.batch_size or 'script default'}"},
        {"quantity": "throughput (samples/s)", "value": _with_range(
            pred.expected_throughput, pred.throughput_range, level)},
        {"quantity": "time (s)", "value": _with_range(pred.expected_time_s, pred.time_range_s,
                                                      level)},
        {"quantity": "peak memory (GiB)", "value": _with_range(
            pred.peak_memory_gb, pred.peak_memory_range_gb, level)},
        {"quantity": "cost ($)", "value": f"{pred.expected_cost:.4g}"},
        {"quantity": "hourly cost ($/h)", "value": f"{pred.hourly_cost:.4g}"},
        {"quantity": "source", "value": pred.source},
        {"quantity": "similar models", "value": ", ".join(pred.similar_models) or "none"},
    ]


def _with_range(value: float, rng: tuple[float, float], level: float) -> str:
    if not math.isfinite(value):
        return "unknown"
    return f"{value:.4g} ({interval_label(level)}: {rng[0]:.4g} to {rng[1]:.4g})"


SIZING_TEXT = (
    "For the next run of each recurring job (configured as its latest run): cloudopt's "
    "requests, fitted to the run's configuration and bounded at 95 % by the history's own "
    "misses (per stage where a stage's needs differ by over 10 %), beside what Robusta KRR's "
    "simple strategy (CPU: the largest run's p95, no limit; memory: the peak + 15 %, as limit "
    "too) and the Kubernetes VPA recommender (90th percentile of decaying histograms + 15 %) "
    "would request from the same series. Runs and hours: what each rests on. "
    "benchmarks/history_backtest.py replays a history to show which requests held.")


def _accuracy_rows(summary: dict[str, float], level: float) -> list[dict[str, Any]]:
    rows = []
    for name, key in (("time", "time"), ("throughput", "throughput"), ("peak memory", "memory")):
        pred = summary.get(f"predictor_{key}_mape", math.nan)
        if math.isfinite(pred):
            rows.append({"quantity": name, "MAPE %": round(pred, 1),
                         "global mean MAPE %": round(summary[f"baseline_{key}_mape"], 1),
                         f"{interval_label(level)} interval coverage %":
                             round(summary.get(f"{key}_coverage", math.nan), 1)})
    return rows


def write_analysis(analyzer: OfflineDataAnalyzer, out_dir: str | os.PathLike,
                   prediction: ResourcePrediction | None = None,
                   accuracy: dict[str, float] | None = None) -> dict[str, Path]:
    """Write ``analysis.md``, ``analysis.html``, ``analysis.json`` and the two plots.

    ``accuracy``: the leave-one-out summary (:func:`~optimizer.offline.evaluation.loo_summary`
    with intervals), shown when given.

    Returns the paths written, by name (``md``, ``html``, ``json``, ``time_vs_cost``,
    ``throughput_scaling``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    analysis = analyzer.analyze_all_logs()
    forecasts = sla_forecasts(analyzer)
    data = analyzer.combined_data
    paths = {"time_vs_cost": plot_time_vs_cost(data, out / "time_vs_cost.png"),
             "throughput_scaling": plot_throughput_scaling(data, out / "throughput_scaling.png")}
    report = Report("Offline analysis of training logs")
    report.paragraph(f"{analysis['runs']} runs of {len(analysis['best'])} models from "
                     f"{analysis['logs']} logs.")
    if analysis["rows_dropped"]:
        report.note("Rows dropped: " + ", ".join(
            f"{n} ({reason})" for reason, n in analysis["rows_dropped"].items()) + ".")
    if analysis["rejected"]:
        report.note("Files not used: " + "; ".join(analysis["rejected"].values()))
    report.heading("Models").table(model_table(analysis))
    report.heading("Best measured configuration per preference")
    report.paragraph("Ranked per sample (time = 1/throughput, cost = hourly cost/throughput), "
                     "so jobs of different sizes compare fairly.")
    report.table(best_table(analysis))
    report.heading("SLA forecast from the history")
    report.paragraph("Next run's time, cost and throughput (SLAConfig.forecast_sla_values: a "
                     "recency-weighted trend; *_se is its standard error; a dash where the "
                     "trend crossed zero).")
    report.table([{"history": k, **{m: v.get(m) for m in
                  ("time", "time_se", "cost", "cost_se", "throughput", "throughput_se",
                   "n_runs")}} for k, v in forecasts.items()])
    sizing = sizing_table(analyzer.right_size())
    if not sizing.empty:
        report.heading("Right-sized requests for the next run")
        report.paragraph(SIZING_TEXT)
        report.table(sizing)
    if prediction is not None:
        report.heading(f"Prediction for the new job (preference: {prediction.preference})")
        report.table(_prediction_rows(prediction))
        for note in prediction.notes:
            report.note(note)
    if accuracy is not None:
        report.heading("Prediction accuracy (leave-one-out)")
        report.paragraph(f"Each of the {accuracy['runs']:.0f} runs predicted from the others; "
                         "the global mean is the others' mean.")
        report.table(_accuracy_rows(accuracy, analyzer.interval_level))
    report.heading("Figures")
    report.figure(paths["time_vs_cost"], "Time vs cost per configuration")
    report.figure(paths["throughput_scaling"], "Throughput vs threads and GPUs/batch size")
    paths["md"], paths["html"] = report.write(out, "analysis")
    payload = {
        "runs": analysis["runs"], "logs": sorted(analyzer.dataframes),
        "rows_dropped": analysis["rows_dropped"], "rejected": analysis["rejected"],
        "models": analysis["models"].replace({np.nan: None}).to_dict("records"),
        "best": analysis["best"], "model_characteristics": analyzer.model_characteristics,
        "sla_forecast": forecasts,
        "prediction": prediction.to_dict() if prediction is not None else None,
        "right_sized": sizing.to_dict("records"), "accuracy": accuracy,
    }
    paths["json"] = out / "analysis.json"
    atomic_write_json(paths["json"], _finite(payload))
    return paths


def _finite(obj: Any) -> Any:
    """NaN and infinities as null, so the JSON is standard."""
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if hasattr(obj, "to_dict") and not isinstance(obj, pd.DataFrame):
        return _finite(obj.to_dict())
    return obj

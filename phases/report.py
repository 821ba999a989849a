"""Phase tables and reports for trace files (what ``python -m optimizer phases`` writes).

- :func:`read_for_model`: read a trace file with the columns a fitted model expects;
- :func:`predict_table`: one row per input row with its phase (warm-up and dropped rows marked);
- :func:`phase_summary`: per-phase statistics, occupancy, prototypes with coverage and the
  transition matrix as one JSON-ready dict (plus agreement with a label column, if given);
- :func:`write_report`: ``report.md``, ``phases.json``, ``transitions.dot`` and PNG figures.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from optimizer.foundation.atomic_files import atomic_write_csv, atomic_write_json, atomic_write_text
from optimizer.foundation.errors import TraceFormatError
from phases.detector import WARMUP, PhaseDetector
from phases.sequences import PrototypeTree, TransitionGraph, phase_stats, run_lengths
from phases.traces import TraceSet, _load_table, traces_from_frame

__all__ = ["read_for_model", "predict_table", "phase_summary", "write_report"]


def read_for_model(
    model: PhaseDetector,
    path: str | os.PathLike,
    *,
    exec_id: str | None = None,
    time: str | None = None,
    invalid: str = "refuse",
) -> tuple[TraceSet, pd.DataFrame]:
    """Read ``path`` with the model's features and its fitted id/time columns (or overrides).

    Returns
    -------
    (TraceSet, DataFrame)
        The executions and the whole source table (for extra columns such as labels).
    """
    exec_id = exec_id or model.exec_id_col_
    if exec_id is None:
        raise TraceFormatError(
            f"{path}: the model was fitted on arrays; give the execution id column (--exec-id)"
        )
    time = time or model.time_col_
    frame = _load_table(Path(path))
    if time is not None and time not in frame.columns and time == model.time_col_:
        time = None  # the fitted time column is optional in other files; file order then
    traces = traces_from_frame(
        frame, exec_id, list(model.feature_names_in_), time, min_length=1, source=str(path),
        invalid=invalid,
    )
    return traces, frame


def predict_table(model: PhaseDetector, traces: TraceSet, frame: pd.DataFrame) -> pd.DataFrame:
    """One row per row of ``frame``, in file order: ``row, <exec id>, [<time>], phase, note``.

    ``phase`` is -1 where there is none; ``note`` says why: ``warm-up`` (fewer than ``delay``
    previous samples) or ``dropped`` (missing id/time, a dying-process sample, or an unusable
    execution; see :mod:`phases.traces`).
    """
    sequences = model.predict(traces)
    phase = np.full(len(frame), WARMUP, dtype=np.int64)
    note = np.full(len(frame), "dropped", dtype=object)
    for rows, seq in zip(traces.rows, sequences, strict=True):
        phase[rows] = seq
        note[rows] = np.where(seq == WARMUP, "warm-up", "")
    out = pd.DataFrame({"row": np.arange(len(frame))})
    out[traces.exec_id_col] = frame[traces.exec_id_col].to_numpy()
    if traces.time_col:
        out[traces.time_col] = frame[traces.time_col].to_numpy()
    out["phase"] = phase
    out["note"] = note
    return out


def _plot_columns(features: Sequence[str]) -> list[int]:
    """CPU and memory columns to draw: the first feature naming each, else the first two."""
    picked = []
    for word in ("cpu", "mem"):
        hits = [i for i, f in enumerate(features) if word in f.lower()]
        if hits:
            picked.append(hits[0])
    return picked or list(range(min(2, len(features))))


def phase_summary(
    model: PhaseDetector,
    traces: TraceSet,
    sequences: Sequence[np.ndarray],
    *,
    labels: Sequence[np.ndarray] | None = None,
    top_k: int = 8,
) -> dict[str, Any]:
    """Everything ``phases.json`` holds, computed from predicted ``sequences``."""
    all_phases = np.concatenate(sequences)
    n_scored = int((all_phases != WARMUP).sum())
    occupancy = {}
    for p in range(model.n_phases_):
        runs = [r.length for s in sequences for r in run_lengths(s) if r.phase == p]
        count = int((all_phases == p).sum())
        occupancy[str(p)] = {
            "samples": count,
            "share": count / max(n_scored, 1),
            "runs": len(runs),
            "mean_run_length": float(np.mean(runs)) if runs else 0.0,
            "executions": int(sum((s == p).any() for s in sequences)),
        }
    stats = phase_stats(traces.arrays, sequences, traces.features)
    tree = PrototypeTree.from_sequences(sequences)
    graph = TransitionGraph.from_sequences(sequences, phases=range(model.n_phases_))
    out: dict[str, Any] = {
        "model": {
            "features": list(model.feature_names_in_),
            "delay": int(model.delay),
            "n_hidden": int(model.n_hidden),
            "n_phases": int(model.n_phases_),
            "preprocess": model.preprocess,
        },
        "traces": {
            "source": traces.source,
            "executions": len(traces),
            "samples": traces.n_samples,
            "warmup_samples": int((all_phases == WARMUP).sum()),
            "skipped_executions": list(traces.skipped),
        },
        "reconstruction_error": model.score(traces) if n_scored else None,
        "occupancy": occupancy,
        "phase_stats": stats.to_dict(orient="records"),
        "prototypes": [
            {"sequence": list(seq), "executions": c, "share": s}
            for seq, c, s in tree.prototypes(top_k)
        ],
        "prototype_coverage": {str(k): tree.coverage(k) for k in (1, 2, 3, 5, top_k)},
        "n_distinct_prototypes": len(tree.counts),
        "transitions": {
            "phases": graph.phases,
            "matrix": graph.matrix.tolist(),
            "counts": graph.counts.tolist(),
        },
    }
    if labels is not None:
        out["labels"] = _label_agreement(sequences, labels)
    return out


def _label_agreement(sequences, labels) -> dict[str, Any]:
    pred = np.concatenate(sequences)
    truth = np.concatenate([np.asarray(lab).astype(str) for lab in labels])
    keep = pred != WARMUP
    table = pd.crosstab(pd.Series(truth[keep], name="label"), pd.Series(pred[keep], name="phase"))
    return {
        "nmi": float(normalized_mutual_info_score(truth[keep], pred[keep])),
        "ari": float(adjusted_rand_score(truth[keep], pred[keep])),
        "crosstab": {
            str(k): {str(p): int(v) for p, v in row.items()} for k, row in table.iterrows()
        },
    }


def _pick_examples(sequences: Sequence[np.ndarray], n: int) -> list[int]:
    """One execution per most common prototype (the longest of each), then the longest rest."""
    tree = PrototypeTree.from_sequences(sequences)
    from phases.sequences import pack_sequence

    packed = [pack_sequence(s) for s in sequences]
    chosen: list[int] = []
    for seq, _, _ in tree.prototypes(n):
        members = [i for i, p in enumerate(packed) if p == seq]
        chosen.append(max(members, key=lambda i: len(sequences[i])))
    rest = sorted(set(range(len(sequences))) - set(chosen), key=lambda i: -len(sequences[i]))
    return (chosen + rest)[:n]


def write_report(
    model: PhaseDetector,
    traces: TraceSet,
    out_dir: str | os.PathLike,
    *,
    labels: Sequence[np.ndarray] | None = None,
    label_name: str = "label",
    n_examples: int = 4,
    title: str | None = None,
) -> dict[str, Any]:
    """Write ``report.md``, ``phases.json``, ``transitions.dot``, ``phases.csv`` and PNGs.

    Returns
    -------
    dict
        The content of ``phases.json``.
    """
    from phases import plots  # matplotlib only when a report is drawn

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sequences = model.predict(traces)
    summary = phase_summary(model, traces, sequences, labels=labels)
    graph = TransitionGraph.from_sequences(sequences, phases=range(model.n_phases_))
    cols = _plot_columns(traces.features)
    names = [traces.features[c] for c in cols]
    figures = {"phase_stats.png": "per-phase distribution", "transitions.png": "transitions"}
    plots.plot_phase_stats(
        traces.arrays, sequences, traces.features, columns=cols, path=out / "phase_stats.png"
    )
    plots.plot_transition_graph(graph, path=out / "transitions.png")
    for i in _pick_examples(sequences, n_examples):
        name = f"trace_{_safe(traces.exec_ids[i])}.png"
        plots.plot_trace(
            traces.arrays[i][:, cols],
            sequences[i],
            times=traces.times[i] - traces.times[i][0],
            time_label=f"{traces.time_col or 'sample'} since the first sample",
            features=names,
            title=f"execution {traces.exec_ids[i]}",
            path=out / name,
        )
        figures[name] = f"execution {traces.exec_ids[i]}"
    summary["figures"] = sorted(figures)
    atomic_write_json(out / "phases.json", summary)
    atomic_write_text(out / "transitions.dot", graph.to_dot())
    atomic_write_csv(out / "phases.csv", traces.per_sample(sequences))
    atomic_write_text(
        out / "report.md", _markdown(summary, graph, figures, title or "Phase report", label_name)
    )
    return summary


def _short_sequence(seq: Sequence[int], limit: int = 24) -> str:
    """A packed sequence as text, the middle elided when it is long (phases.json has it all)."""
    text = [str(p) for p in seq]
    if len(text) > limit:
        text = text[: limit // 2] + [f"... ({len(seq) - limit} more) ..."] + text[-limit // 2 :]
    return " > ".join(text) or "(warm-up only)"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]


def _md_table(frame: pd.DataFrame, floatfmt: str = "{:.3g}") -> str:
    def cell(v: Any) -> str:
        return floatfmt.format(v) if isinstance(v, (float, np.floating)) else str(v)

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def _markdown(
    summary: dict, graph: TransitionGraph, figures: dict, title: str, label_name: str
) -> str:
    t, m = summary["traces"], summary["model"]
    error = summary["reconstruction_error"]
    intro = (
        f"Traces: `{t['source']}`: {t['executions']} executions, {t['samples']} samples "
        f"({t['warmup_samples']} warm-up samples labelled -1). Model: CRBM with delay "
        f"{m['delay']}, {m['n_hidden']} hidden units, {m['n_phases']} phases, features "
        f"{', '.join(m['features'])}."
    )
    if error is not None:
        intro += f" Reconstruction error (scaled units, lower is better): {error:.4f}."
    lines = [f"# {title}", "", intro, "", "## Phases", ""]
    occ = pd.DataFrame([{"phase": int(p), **v} for p, v in summary["occupancy"].items()])
    lines += [_md_table(occ), "", "## Per-phase statistics (original units)", ""]
    stats = pd.DataFrame(summary["phase_stats"])
    if len(stats):
        lines.append(
            _md_table(
                stats[["phase", "feature", "count", "mean", "std", "q1", "median", "q3", "max"]]
            )
        )
    lines += ["", "## Prototypes (packed phase sequences)", ""]
    proto = pd.DataFrame(
        [
            {
                "rank": i + 1,
                "sequence": _short_sequence(p["sequence"]),
                "executions": p["executions"],
                "share": p["share"],
            }
            for i, p in enumerate(summary["prototypes"])
        ]
    )
    if len(proto):
        proto["cumulative"] = proto["share"].cumsum()
        lines.append(_md_table(proto))
    cov = summary["prototype_coverage"]
    lines += [
        "",
        f"{summary['n_distinct_prototypes']} distinct packed sequences; top-3 cover "
        f"{100 * cov['3']:.0f}% of executions, top-5 {100 * cov['5']:.0f}%.",
        "",
        "## Transition probabilities (per sample; rows: from, columns: to)",
        "",
        _md_table(graph.to_frame().reset_index().rename(columns={"from": "from \\ to"}), "{:.3f}"),
        "",
    ]
    if "labels" in summary:
        lab = summary["labels"]
        lines += [
            f"## Agreement with `{label_name}`",
            "",
            f"NMI {lab['nmi']:.3f}, ARI {lab['ari']:.3f} (warm-up samples excluded).",
            "",
        ]
        ct = pd.DataFrame(lab["crosstab"]).T.fillna(0).astype(int)
        ct.index.name = label_name
        lines += [_md_table(ct.reset_index()), ""]
    lines += ["## Figures", ""]
    lines += [f"![{text}]({name})" for name, text in figures.items()]
    return "\n".join(lines) + "\n"

"""Outputs of an autoscaling evaluation: policy tables, the target check and ``report.md``.

:func:`write_outputs` writes them with the metrics, the settings and the plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from phases.evaluation.metrics import EvaluationResult
from phases.evaluation.plots import plot_allocations, plot_policy_bars

TABLE_COLUMNS = (
    ("over_allocation_pct", "over-alloc %", "{:.1f}"),
    ("over_allocation_vs_oracle", "× oracle-rules", "{:.2f}"),
    ("under_provisioned_pct", "under-prov %", "{:.1f}"),
    ("shortfall_pct", "shortfall %", "{:.2f}"),
    ("rescales", "rescales", "{:d}"),
    ("reduction_vs_reactive_pct", "Δ vs reactive-rules %", "{:+.1f}"),
    ("reduction_vs_reactive_matched_pct", "Δ vs reactive-rules @ same under %", "{:+.1f}"),
    ("reduction_vs_vpa_matched_pct", "Δ vs vpa @ same under %", "{:+.1f}"),
    ("steady_over_allocation_pct", "after 1st cycle: over %", "{:.1f}"),
    ("steady_under_provisioned_pct", "after 1st cycle: under %", "{:.1f}"),
)


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "n/a"
    return spec.format(value)


def format_table(result: EvaluationResult, resource: str, *, markdown: bool = True) -> str:
    """The policy table of one resource, as Markdown or aligned plain text."""
    columns = [
        c for c in TABLE_COLUMNS if any(c[0] in m[resource] for m in result.metrics.values())
    ]
    header = ["policy"] + [c[1] for c in columns]
    rows = [
        [name] + [_fmt(m[resource].get(key), spec) for key, _, spec in columns]
        for name, m in result.metrics.items()
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def fmt(r: list[str]) -> str:
        cells = (
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        return "  ".join(cells)

    return "\n".join([fmt(header)] + [fmt(r) for r in rows])


def target_verdict(
    result: EvaluationResult, *, reduction: float = 30.0, max_under: float = 5.0
) -> dict[str, dict[str, dict[str, bool]]]:
    """The issue's target per phase policy and resource, read two ways.

    ``measured``: ≥ ``reduction`` % less over-allocation than reactive-rules, ≤ ``max_under`` %
    samples under-provisioned, and less over-allocation and no more under-provisioning than
    vpa, all as measured. ``matched``: the same with reactive-rules and vpa each scaled to the
    policy's own under-provisioning level (``reduction_vs_*_matched_pct``).
    """
    out: dict[str, dict[str, dict[str, bool]]] = {}
    vpa = result.metrics.get("vpa")
    for name, m in result.metrics.items():
        if not name.startswith("phase-"):
            continue
        out[name] = {"measured": {}, "matched": {}}
        for r, v in m.items():
            under_ok = v["under_provisioned_pct"] <= max_under
            measured = under_ok and v.get("reduction_vs_reactive_pct", np.nan) >= reduction
            if vpa is not None:
                measured = measured and v["over_allocation_pct"] < vpa[r]["over_allocation_pct"]
                measured = measured and (
                    v["under_provisioned_pct"] <= vpa[r]["under_provisioned_pct"]
                )
            matched = under_ok and v.get("reduction_vs_reactive_matched_pct", np.nan) >= reduction
            if vpa is not None:
                matched = matched and v.get("reduction_vs_vpa_matched_pct", np.nan) > 0
            out[name]["measured"][r] = bool(measured)
            out[name]["matched"][r] = bool(matched)
    return out


def write_outputs(
    result: EvaluationResult, out: str | Path, *, plot_exec: str | None = None
) -> Path:
    """Write the evaluation to ``out``.

    ``metrics.json`` (policy → resource → metric → value), ``metrics.csv`` (one row per policy
    and resource), ``settings.json`` (split, cycle, phase model, target check), ``report.md``,
    ``allocation.png`` (use and allocations over time for ``plot_exec``, default the test
    execution with the most cycles) and ``policies.png`` (bar charts).
    """
    from optimizer.foundation.atomic_files import atomic_write_json, atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in result.settings.items()}
    atomic_write_json(out / "metrics.json", result.metrics)
    atomic_write_json(out / "settings.json", {**settings, "target": target_verdict(result)})
    rows = [
        "policy,resource,"
        + ",".join(sorted({k for m in result.metrics.values() for v in m.values() for k in v}))
    ]
    keys = rows[0].split(",")[2:]
    for name, m in result.metrics.items():
        for r, v in m.items():
            rows.append(",".join([name, r] + [repr(v.get(k, "")) for k in keys]))
    atomic_write_text(out / "metrics.csv", "\n".join(rows) + "\n")
    exec_id = plot_exec or _busiest(result)
    plot_allocations(result, exec_id, out / "allocation.png")
    plot_policy_bars(result, out / "policies.png")
    atomic_write_text(out / "report.md", render_report(result, exec_id))
    return out


def _busiest(result: EvaluationResult) -> str:
    return max(result.test, key=lambda e: e.n_cycles).exec_id


def render_report(result: EvaluationResult, plot_exec: str) -> str:
    """The Markdown report: settings, one policy table per resource, the target check."""
    s = result.settings
    lines = [
        "# Autoscaling policy evaluation",
        "",
        f"- traces: `{s.get('traces', '?')}`; resources {', '.join(result.resources)}; "
        f"phase features {', '.join(s.get('features', []))}",
        f"- cycle {s.get('cycle_s')} s (sampling period ≈ {s.get('sampling_period_s', float('nan')):.3g} s), "
        f"tolerance {100 * s.get('tolerance', 0.05):.0f}%, seed {s.get('seed')}",
        (
            f"- {s['folds']}-fold cross-validation over executions (each tested once, models "
            f"fitted on the other folds): {len(result.test)} test executions"
            if s.get("folds")
            else f"- leave-one-{s['group']}-out (each {s['group']} tested by models fitted on "
            f"the others' executions only): {len(result.test)} test executions"
            if s.get("group")
            else f"- {len(result.train)} training executions, {len(result.test)} test "
            f"executions: {', '.join(e.exec_id for e in result.test)}"
        ),
        f"- phase model: {s.get('phase_model', 'not used')}",
        "- first cycle of every practical policy (no history yet): "
        + (
            "mean + 2 std of the training samples in their executions' first cycle"
            if s.get("cold_start") == "first-cycle"
            else "the peak of the same job's previous run "
            f"({s.get('with_previous_run')} executions had one; the others: mean + 2 std of "
            "all training samples)"
            if s.get("cold_start") == "previous-run"
            else "mean + 2 std of all training samples"
        )
        + "; `after 1st cycle` columns leave that shared rule out",
        "- `Δ vs reactive-rules/vpa @ same under %`: the reference scaled by the smallest factor "
        "that brings its under-provisioning down to the policy's (the reference against "
        "itself reads negative when it could be scaled down at no extra risk)",
        "",
    ]
    for r in result.resources:
        lines += [f"## {r}", "", format_table(result, r), ""]
    lines += [
        "## Target",
        "",
        "Phase policy with ≥30% less over-allocation than reactive-rules at ≤5% samples "
        "under-provisioned, and better than vpa on both (measured: as the table reads; "
        "matched: reactive-rules and vpa scaled to the policy's under-provisioning level):",
        "",
    ]
    for name, readings in target_verdict(result).items():
        for how, checks in readings.items():
            lines.append(
                f"- {name} ({how}): "
                + ", ".join(f"{r} {'met' if ok else 'not met'}" for r, ok in checks.items())
            )
    lines += [
        "",
        f"![allocation vs use, {plot_exec}](allocation.png)",
        "",
        "![over-allocation and under-provisioning per policy](policies.png)",
        "",
    ]
    return "\n".join(lines)

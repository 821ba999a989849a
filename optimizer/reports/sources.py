"""The report's section on where the reference trial's figures came from: the throughput's
source, the job's size, and what the in-process probe saw of the script."""

from __future__ import annotations

from optimizer.reports.render import Report, fmt
from optimizer.trials.probe.summary import disagreement
from optimizer.trials.records import TrialSummary

_SOURCE_WORDS = {
    "probe": "the training steps the in-process probe counted",
    "metrics_csv": "the rows the script wrote to OPTIMIZER_METRICS_CSV",
    "stdout": "the rates the script printed",
    "wall_time": "the run's wall time",
}


def sources_section(r: Report, t: TrialSummary) -> None:
    """Where the reference trial's figures came from, and what the probe saw of the script."""
    r.heading("Where the figures come from")
    lines = [f"Throughput: {_SOURCE_WORDS.get(t.throughput_source, t.throughput_source)}."]
    lines.append(f"The job's size ({t.total_samples:.6g} samples): {t.job_size_source}."
                 if t.total_samples and t.job_size_source else "The job's size: unknown.")
    p = t.probe
    if not p:
        lines.append("The in-process probe was off.")
    elif not p.get("steps"):
        lines.append("The probe saw no training step (no backward pass, no torch.optim "
                     "step): its figures come from what the script printed or its wall time.")
    else:
        lines.append(step_words(p))
        seen = f"The probe saw {p['steps']} {p.get('step_unit', 'optimizer step')}s"
        seen += (f" of {p['samples_per_step']} samples" if p.get("samples_per_step") else
                 " (samples unknown: the rates are steps per second)")
        if p.get("dataset_len"):
            seen += (f", a training set of {p['dataset_len']} samples over "
                     f"{p.get('train_epochs', 0)} completed epochs")
        if p.get("epochs"):
            seen += f" ({p['epochs']} epochs in the job: {p.get('epochs_source')})"
        if p.get("loss_first") is not None:
            seen += f"; loss {fmt(p['loss_first'])} → {fmt(p.get('loss_last'))}"
        lines.append(seen + ".")
        gap = disagreement(p)
        if gap:
            lines.append(f"The script {gap}.")
    r.paragraph(" ".join(lines))


def step_words(p: dict) -> str:
    """What one step and one sample were, as the probe decided from what it saw."""
    unit, passes = p.get("step_unit", "optimizer step"), p.get("backward_passes") or 0
    if unit == "backward pass":
        step = ("One step is one backward pass: the script updates its weights without "
                "torch.optim.")
    elif passes and p.get("steps") and passes > 1.05 * p["steps"]:
        step = (f"One step is one optimizer step, over {passes / p['steps']:.3g} backward "
                "passes (gradient accumulation, or a closure that evaluates several times).")
    else:
        step = "One step is one optimizer step (one backward pass each)."
    sample = ("One sample is one row of the batches the training DataLoader yields, counted "
              "once at the backward pass after it was fetched." if p.get("dataset_len") else
              "One sample is one row of the batch the trial set (no DataLoader showed one).")
    return f"{step} {sample}"


__all__ = ["sources_section", "step_words"]

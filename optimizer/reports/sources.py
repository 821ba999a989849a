"""The report's section on where the reference trial's figures came from: the throughput's
source, the job's size, and what the in-process probe saw of the script."""

from __future__ import annotations

from optimizer.reports.render import Report
from optimizer.trials.probe.summary import disagreement
from optimizer.trials.records import TrialSummary

_SOURCE_WORDS = {
    "probe": "the optimizer steps the in-process probe counted",
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
        lines.append("The probe saw no optimizer step (a script that does not train with "
                     "torch.optim): its figures come from what the script printed or its "
                     "wall time.")
    else:
        seen = f"The probe saw {p['steps']} optimizer steps of {p.get('samples_per_step')} samples"
        if p.get("dataset_len"):
            seen += (f", a training set of {p['dataset_len']} samples over "
                     f"{p.get('train_epochs', 0)} completed epochs")
        if p.get("epochs"):
            seen += f" ({p['epochs']} epochs in the job: {p.get('epochs_source')})"
        if p.get("loss_first") is not None:
            seen += f"; loss {p['loss_first']:.4g} → {p['loss_last']:.4g}"
        lines.append(seen + ".")
        gap = disagreement(p)
        if gap:
            lines.append(f"The script {gap}.")
    r.paragraph(" ".join(lines))


__all__ = ["sources_section"]

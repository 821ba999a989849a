"""The learning rate to go with a changed batch size, measured rather than assumed.

A larger batch averages more samples per step; the common rules scale the learning rate with
it, linearly (Goyal et al. 2017) or by its square root (Krizhevsky 2014; Adam-type optimizers
often prefer it), and which one holds depends on the script. With ``--lr-arg FLAG`` and a
recommended batch ``B`` other than the script's ``B0``, the recommended setting is probed twice
more, at ``lr × B/B0`` and ``lr × sqrt(B/B0)``, and the loss the three runs (the unscaled one
is the recommendation's own trial) reach after the same number of samples decides (the mean of
the last quarter of the samples all three saw: a rate that trains faster reaches a plateau
sooner, so a slope would not tell them apart). A rule is recommended only when its loss is
below the unscaled rate's beyond both 90% intervals; otherwise the learning rate stays, and
the report says the batch change keeps it. The stage :class:`LearningRate` does this once the
final choice is made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizer.foundation.job import Job
from optimizer.search.core.port import SearchPort
from optimizer.search.core.state import SearchState
from optimizer.search.goodput.efficiency import loss_points
from optimizer.trials.probe import EVENTS_FILE, read_probe
from optimizer.trials.records import TrialSummary, trial_files
from optimizer.trials.runner import with_flag
from optimizer.trials.settings.config_args import parse_form, setting_value
from optimizer.trials.training import TrainingModuleManager

RULES = {"linear": lambda ratio: ratio, "square root": math.sqrt}
Z90 = 1.645
MIN_POINTS = 4


def script_lr(manager: TrainingModuleManager, flag: str) -> tuple[float | None, str]:
    """The learning rate the script runs with: ``flag``'s value as its arguments pass it (a
    flag, a Hydra override, a config file's key: :func:`setting_value`), else the flag's
    literal default in its source; (None, why) when neither says."""
    found = setting_value(list(manager.train_args), manager.module, flag)
    if found is None:
        return None, f"no numeric default of {flag} in the script's source"
    if found.number is None or found.number <= 0:
        return None, f"{flag} {found.value!r} ({found.source}) is not a number"
    return float(found.number), found.source


def _with_lr(manager: TrainingModuleManager, flag: str, lr: float) -> TrainingModuleManager:
    """A manager for the same script whose runs get ``flag lr`` (replacing a given one)."""
    return manager.with_train_args(with_flag(list(manager.train_args), flag, f"{lr:.6g}",
                                             manager.config_copies))


def _curve(trial: TrialSummary | None, run_dir: Path, batch: int) -> Any:
    """(samples, loss) of a trial's probe record (None without one)."""
    if trial is None or not trial.ok:
        return None
    record = read_probe(trial_files(run_dir, trial) / EVENTS_FILE)
    return None if record is None else loss_points(record, batch)


def _end_losses(curves: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each run's mean loss over the last quarter of the samples every run saw, with a 90%
    interval from the points' standard error."""
    seen = [c[0].max() for c in curves.values() if c is not None and len(c[0])]
    span = min(seen) if len(seen) == len(curves) else None
    out: dict[str, dict[str, Any]] = {}
    for name, c in curves.items():
        if c is None or span is None:
            out[name] = {"value": None, "why": "no loss recorded in every run"}
            continue
        x, y = c
        last = y[(x >= 0.75 * span) & (x <= span)]
        if len(last) < MIN_POINTS:
            out[name] = {"value": None, "why": f"{len(last)} loss samples in the compared "
                         f"stretch (need {MIN_POINTS})"}
            continue
        mean, se = float(last.mean()), float(last.std(ddof=1) / math.sqrt(len(last)))
        out[name] = {"value": mean, "low": mean - Z90 * se, "high": mean + Z90 * se,
                     "points": int(len(last)), "after_samples": float(span)}
    return out


def tune_learning_rate(port: SearchPort, manager: TrainingModuleManager, final: TrialSummary,
                       ref_batch: int | None, flag: str, run_dir: Path, job: Job,
                       total: float | None, batch_settable: bool) -> dict[str, Any]:
    """Measure the two rules at the recommended setting (module doc); the decision, its
    figures and a sentence for the report (``note``)."""
    batch = final.allocation.batch_size
    out: dict[str, Any] = {"flag": flag}
    if batch is None or ref_batch is None or int(batch) == int(ref_batch):
        out["note"] = (f"the recommended batch is the script's own: {flag} stays as it is")
        return out
    lr, source = script_lr(manager, flag)
    out.update(script_lr=lr, script_lr_source=source)
    if lr is None:
        out["note"] = f"the learning rate is kept ({source}), so it could not be scaled"
        return out
    ratio = int(batch) / int(ref_batch)
    runs: dict[str, dict[str, Any]] = {"unscaled": {"lr": lr, "trial": final.trial_id}}
    curves = {"unscaled": _curve(final, run_dir, int(batch))}
    for rule, scale in RULES.items():
        new_lr = lr * scale(ratio)
        twin = _with_lr(manager, flag, new_lr)
        prefix = "lr-" + rule.replace(" ", "")
        trial = port.measure(twin, final.allocation, prefix, run_dir, job, total)
        trial = port.label_batch(trial, run_dir / "trials" / trial.trial_id, batch_settable)
        runs[rule] = {"lr": new_lr, "trial": trial.trial_id}
        curves[rule] = _curve(trial, run_dir, int(batch))
    for name, loss in _end_losses(curves).items():
        runs[name]["loss"] = loss
    out["runs"] = runs
    out.update(_decide(runs, flag, lr, int(batch), int(ref_batch)))
    return out


def _decide(runs: dict[str, dict[str, Any]], flag: str, lr: float, batch: int,
            ref: int) -> dict[str, Any]:
    """The rule whose loss after the same samples is below the unscaled run's beyond both
    intervals (the lowest such), if any."""
    base = runs["unscaled"].get("loss", {})
    if base.get("value") is None:
        return {"rule": None, "lr": lr, "note": (
            f"the learning rate is kept at {lr:g}: the loss at batch {batch} could not be "
            f"compared ({base.get('why')})")}
    better: Sequence[tuple[float, str]] = sorted(
        (p["loss"]["value"], rule) for rule, p in runs.items()
        if rule != "unscaled" and p.get("loss", {}).get("value") is not None
        and p["loss"]["high"] < base["low"])
    if not better:
        return {"rule": None, "lr": lr, "note": (
            f"batch {batch} keeps {flag} {lr:g}: neither the linear nor the square-root rule "
            f"(×{batch / ref:g} or ×{math.sqrt(batch / ref):.3g}) reached a measurably lower "
            "loss after the same samples in the probes")}
    loss, rule = better[0]
    new = runs[rule]["lr"]
    return {"rule": rule, "lr": new, "note": (
        f"with batch {batch}, use {flag} {new:.3g} (the {rule} rule from the script's {lr:g}): "
        f"after the same samples its loss was {loss:.4g} against {base['value']:.4g}")}


def lr_args(flag: str | None, decision: dict[str, Any]) -> list[str]:
    """The arguments that carry the decision into the Job's command (none when kept), in the
    flag's own form (``--lr 0.04``, ``--lr=0.04``, ``optim.lr=0.04``). A key of a config file
    (``cfg.yaml:optim.lr``) gives none: appended arguments cannot change a file."""
    if not flag or not decision.get("rule") or parse_form(flag).kind == "file":
        return []
    return with_flag([], flag, f"{decision['lr']:.6g}")


class LearningRate:
    """Stage: with ``--lr-arg``, the learning rate measured at the final choice's setting
    (:func:`tune_learning_rate`), or why not (the budget left no two runs for it);
    ``state.learning_rate`` holds the decision (None without the flag)."""

    name = "learning-rate"

    def run(self, state: SearchState) -> None:
        port, job, eff, budget = state.port, state.job, state.efficiency, state.port.budget
        final = state.final
        assert final is not None  # the final choice runs first
        flag = job.spec.lr_arg
        if flag and budget is not None and not budget.allows(2):
            out = {"flag": flag, "note": f"the budget of {budget.total} runs left none to "
                   "measure the learning rate: it is kept"}
        elif flag:
            ref = None if eff is None else eff.ref_batch
            out = tune_learning_rate(port, job.manager, final, ref, flag, job.run_dir, job.spec,
                                     job.total, job.batch_settable)
            out["args"] = lr_args(flag, out)
        else:
            return
        state.learning_rate = out


__all__ = ["LearningRate", "lr_args", "script_lr", "tune_learning_rate"]

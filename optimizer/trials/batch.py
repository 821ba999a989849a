"""The batch size a trial ran with, so that every trial can feed the workload model.

A trial's batch is the one its allocation set; else the one the script reported (its metrics,
or a ``batch_size=N`` line of its output) unless that differs from a settable flag's default
and is not what the loader served (a printed effective batch: the label stays in the flag's
units); else the script's own default, read from its source
(:func:`script_default_batch`, also where a config file sets it); else, for a
batch cloudopt cannot set, the samples per optimizer step the in-process probe saw. A script
whose batch is neither known nor settable is labelled with a nominal 1: its throughput is
samples per second all the same, and the workload model then keeps the batch fixed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from optimizer.trials.output import BATCH_SIZE_PATTERN
from optimizer.trials.records import TrialSummary
from optimizer.trials.script_scan import ScriptInfo, env_default
from optimizer.trials.settings.config_args import SettingValue, setting_value


def script_default_batch(script: ScriptInfo, args: Sequence[str], batch_size_arg: str | None,
                         batch_size_env: str | None) -> SettingValue | None:
    """The batch size the script runs with when no trial sets one (a whole number in
    ``value``), and where it comes from, found without running it: the setting
    ``batch_size_arg`` names as ``args`` pass it (flag, Hydra override, config file: see
    :func:`~optimizer.trials.settings.config_args.setting_value`), else ``batch_size_env`` as
    this process passes it on, else the fallback the source reads for that variable
    (``OPTIMIZER_BATCH_SIZE`` without either option). None when nothing says."""
    if batch_size_arg:
        found = setting_value(args, script, batch_size_arg)
        whole = found.whole(1) if found is not None else None
        if found is not None and whole is not None:
            return SettingValue(whole, found.source, found.file)
    variable = batch_size_env or "OPTIMIZER_BATCH_SIZE"
    inherited = os.environ.get(variable, "").strip() if batch_size_env else ""
    if inherited.isdigit() and int(inherited) > 0:  # a default run inherits it
        return SettingValue(int(inherited), f"{variable} in cloudopt's environment")
    fallback = env_default(script.tree, variable)
    return None if fallback is None else SettingValue(
        fallback, f"the fallback of {variable} in the script's source")


def _effective_batch(t: TrialSummary, trial_dir: Path | None = None) -> int | None:
    """The batch size a trial ran with: the allocation's, or what the script reported (its
    metrics/model info, else a ``batch_size=N`` line of its output)."""
    if t.allocation.batch_size is not None:
        return int(t.allocation.batch_size)
    value = (t.model_info or {}).get("batch_size")
    if value is None and trial_dir is not None and (trial_dir / "stdout.log").exists():
        with open(trial_dir / "stdout.log", encoding="utf-8", errors="replace") as fh:
            m = BATCH_SIZE_PATTERN.search(fh.read(20_000))
        value = m.group(1) if m else None
    return _positive_int(value)


def _positive_int(value: object) -> int | None:
    try:
        return int(round(float(value))) if value is not None and float(value) > 0 else None
    except (TypeError, ValueError):
        return None


def _with_batch(t: TrialSummary, trial_dir: Path | None = None,
                default_batch: int | None = None) -> TrialSummary:
    b = _effective_batch(t, trial_dir)
    seen = _positive_int((t.probe or {}).get("samples_per_step"))
    if t.allocation.batch_size is None and default_batch and b not in (None, default_batch) \
            and seen != b:
        # A printed batch that is not the flag's default and not what the loader served is
        # another batch (grad_accum.py prints its effective batch, 16 x 4 micro-batches): the
        # other trials are labelled in the flag's units, so the default is this one's label.
        b = default_batch
    if b is None or t.allocation.batch_size == b:
        return t
    copy = TrialSummary.from_dict(t.to_dict())
    copy.allocation.batch_size = b
    return copy


def label_batch(t: TrialSummary, trial_dir: Path | None, default_batch: int | None,
                settable: bool) -> TrialSummary:
    """``t`` with the batch size it ran with (see the module docstring)."""
    t = _with_batch(t, trial_dir, default_batch if settable else None)
    if t.allocation.batch_size is None:
        # The probe's samples per optimizer step only for a batch cloudopt cannot set (every
        # trial then runs the same one): with gradient accumulation it is a multiple of the
        # batch that settable trials are labelled with. Before it, such a script was "batch 1"
        # in every table and note.
        seen = None if settable else _positive_int((t.probe or {}).get("samples_per_step"))
        label = default_batch or (None if settable else seen or 1)
        if label is not None:
            t = TrialSummary.from_dict(t.to_dict())
            t.allocation.batch_size = int(label)
    return t

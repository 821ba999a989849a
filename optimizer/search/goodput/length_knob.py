"""Where a job's length is set, and how long the script's own run is: epochs or steps.

A job is measured in epochs (``--epochs 4``: every batch size trains on the same samples) or in
steps (``max_iters = 5000``, ``--max_steps 500``, ``trainer.max_steps=500``: a larger batch
trains on more samples in the same steps). The knob is read from the script's arguments in the
forms users write them (``--name V``, ``--name=V``, dotted ``--trainer.max_steps V``, Hydra's
``name=V``, ``+name=V``), else from a literal default in the source: an argparse/click flag, a
module-level global (nanoGPT's configurator overrides those with ``--name=V``) or a field of a
config dataclass (set through flags named like the batch's, ``--trainer.max_iters=``).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from optimizer.trials.script_scan import ScriptInfo, flag_number_default
from optimizer.trials.settings.config_args import (
    CONFIG_FLAGS,
    field_default,
    parse_form,
    setting_value,
)
from optimizer.trials.settings.config_files import (
    CONFIG_SUFFIXES,
    hydra_primary,
    read_config,
    read_python_config,
)

EPOCH_FLAGS = ("--epochs", "--num-epochs", "--num_epochs", "--n-epochs", "--n_epochs",
               "--max-epochs", "--max_epochs", "--epoch", "--nepochs",
               "--num-train-epochs", "--num_train_epochs")
STEP_NAMES = ("max_iters", "max_steps", "max_iter", "max_iterations", "num_steps", "num_iters",
              "num_iterations", "total_steps", "train_steps", "num_train_steps", "n_steps",
              "n_iters", "training_steps", "iterations", "iters", "steps")
"""Names (the last dotted part, dashes read as underscores) of a setting that counts a job's
optimizer steps."""
EPOCH_NAMES = tuple(sorted({f.lstrip("-").replace("-", "_") for f in EPOCH_FLAGS}))

_ARG = re.compile(r"^(?P<lead>--?|\+\+?)?(?P<name>[A-Za-z_][\w.-]*)(?P<eq>=)?(?P<value>.*)$")


@dataclass(frozen=True)
class Knob:
    """A setting of the job's length: ``flag`` (a flag, ``--epochs``, or a template with
    ``{}``: ``--max_iters={}``, ``trainer.max_steps={}``; None where it cannot be set), the
    script's own ``value`` (None: not known), ``unit`` (``epochs`` or ``steps``), whether
    the value is ``fractional`` and ``source``, where both were read."""

    flag: str | None
    value: float | None
    unit: str
    fractional: bool
    source: str


def knob_name(text: str) -> str:
    """The setting's own name in a flag, a template or an override: its last dotted part,
    dashes read as underscores (``--trainer.max-steps={}`` gives ``max_steps``)."""
    m = _ARG.match(text.strip())
    name = (m.group("name") if m else text).split(".")[-1]
    return name.replace("-", "_").lower()


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 and math.isfinite(value) else None


def in_arguments(args: Sequence[str], names: Sequence[str]) -> tuple[str, str, str] | None:
    """The last of ``args`` that sets one of ``names`` to a positive number, as ``(template
    that sets it again, the value's text, the argument as written)``: later overrides win, as
    in every parser that reads them in order."""
    found = None
    given = list(args)
    for i, a in enumerate(given):
        m = _ARG.match(a)
        if not m or knob_name(m.group("name")) not in names:
            continue
        lead, name = m.group("lead") or "", m.group("name")
        if m.group("eq"):
            value, template = m.group("value"), f"{lead}{name}={{}}"
        elif lead.startswith("-") and i + 1 < len(given):
            value, template = given[i + 1], f"{lead}{name}"
        else:
            continue
        if _number(value) is not None:
            found = (template, value, a if m.group("eq") else f"{a} {value}")
    return found


def _literal_default(tree: ast.Module, names: Sequence[str]) -> tuple[str, float, bool] | None:
    """A name among ``names`` bound to a positive number literal at module level or in a class
    body (a config dataclass's field): ``(name, value, is_float)``."""
    scopes = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for body in scopes:
        for node in body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            if not isinstance(target, ast.Name) or target.id.lower() not in names:
                continue
            value = field_default(value)
            if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) \
                    and not isinstance(value.value, bool) and value.value > 0:
                return target.id, float(value.value), isinstance(value.value, float)
    return None


def like_batch_flag(name: str, batch_flag: str | None) -> str | None:
    """The flag that sets the setting ``name`` the way the batch's flag is written
    (``--trainer.batch_size={}`` gives ``--trainer.max_iters={}``, HfArgumentParser's
    ``--per_device_train_batch_size`` gives ``--max_steps``); None without a batch flag."""
    m = _ARG.match(batch_flag.strip()) if batch_flag else None
    if not m or parse_form(batch_flag or "").kind == "file":
        return None
    head, _, _ = m.group("name").rpartition(".")
    flag = f"{m.group('lead') or ''}{head + '.' if head else ''}{name}"
    return flag + "={}" if "{" in (batch_flag or "") else flag


def read_knob(tree: ast.Module | None, args: Sequence[str], *, epochs_flag: str | None = None,
              steps_flag: str | None = None, batch_flag: str | None = None,
              script: ScriptInfo | None = None) -> Knob | None:
    """The job's length setting: the one named (``--steps-arg``, ``--epochs-arg``), else a
    steps setting the arguments give (it overrides epochs in Lightning and Hugging Face), else
    one a config file sets (a ``--config`` YAML, a Hydra config, a nanoGPT positional config),
    else an epochs flag in the arguments or the source, else a steps setting in the source.
    None when nothing says. ``script`` (its path and tree) lets config files be found."""
    for flag, unit in ((steps_flag, "steps"), (epochs_flag, "epochs")):
        if flag:
            return _named(tree, args, flag, unit, script)
    for names, unit, fallback in ((STEP_NAMES, "steps", False), (EPOCH_NAMES, "epochs", True)):
        hit = in_arguments(args, names)
        if hit is not None:
            return Knob(hit[0], _number(hit[1]), unit, unit == "epochs" and "." in hit[1],
                        f"{hit[2]} in the script's arguments")
        if not fallback and script is not None:
            for config_names, config_unit in ((STEP_NAMES, "steps"), (EPOCH_NAMES, "epochs")):
                found = in_config_files(script, args, config_names, batch_flag)
                if found is not None:
                    template, value, source = found
                    return Knob(template, value, config_unit,
                                config_unit == "epochs" and not float(value).is_integer(),
                                source)
        if fallback and tree is not None:
            for flag in EPOCH_FLAGS:
                node = flag_number_default(tree, flag)
                if node is not None:
                    return Knob(flag, float(node), "epochs", isinstance(node, float),
                                f"the default of {flag} in the script's source")
    if tree is None:
        return None
    for flag in _source_flags(tree, STEP_NAMES):
        node = flag_number_default(tree, flag)
        if node is not None:
            return Knob(flag, float(node), "steps", False,
                        f"the default of {flag} in the script's source")
    found = _literal_default(tree, STEP_NAMES)
    if found is not None:
        name, value, _ = found
        return Knob(like_batch_flag(name, batch_flag), value, "steps", False,
                    f"{name} = {value:g} in the script's source")
    return None


def _named(tree: ast.Module | None, args: Sequence[str], flag: str, unit: str,
           script: ScriptInfo | None = None) -> Knob:
    """The knob the user named: its value in the arguments or their config files (any form
    :func:`~optimizer.trials.settings.config_args.setting_value` reads, a ``FILE:KEY`` one
    included), else a default in the source."""
    if script is not None:
        given = setting_value(args, script, flag)
        value = _number(str(given.value)) if given is not None else None
        if value is not None:
            return Knob(flag, value, unit, unit == "epochs" and not value.is_integer(),
                        given.source)
    name = knob_name(flag)
    hit = in_arguments(args, (name,))
    if hit is not None:
        return Knob(flag, _number(hit[1]), unit, unit == "epochs" and "." in hit[1],
                    f"{hit[2]} in the script's arguments")
    if tree is not None:
        node = flag_number_default(tree, flag)
        if node is not None:
            return Knob(flag, float(node), unit, isinstance(node, float),
                        f"the default of {flag.split('=', 1)[0]} in the script's source")
        found = _literal_default(tree, (name,))
        if found is not None:
            return Knob(flag, found[1], unit, unit == "epochs" and found[2],
                        f"{found[0]} = {found[1]:g} in the script's source")
    return Knob(flag, None, unit, False, f"no value of {flag} found in the arguments or source")


def _flat(data: object, prefix: str = "") -> list[tuple[str, object]]:
    """``(dotted key, value)`` of every leaf of a nested config mapping, in file order."""
    if not isinstance(data, dict):
        return [(prefix, data)] if prefix else []
    out: list[tuple[str, object]] = []
    for k, v in data.items():
        out += _flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def in_config_files(script: ScriptInfo, args: Sequence[str], names: Sequence[str],
                    batch_flag: str | None) -> tuple[str, float, str] | None:
    """A setting among ``names`` with a positive number in the config files the run reads: the
    Hydra config of ``@hydra.main`` (set again by ``key=V``), ``--config`` YAML/JSON files
    (``--key V``, or ``--key=V`` where the batch's flag is written so) and a configurator's
    positional ``.py`` config (``--key=V``); the last file wins. ``(template, value, where)``."""
    found = None
    hydra = hydra_primary(script.path, script.tree, args) if script.tree is not None else None
    sources: list[tuple[object, str, str]] = []
    if hydra is not None:
        sources.append((hydra[0], str(hydra[1]), "{key}={{}}"))
    dashed = "--{key}={{}}" if batch_flag and "=" in batch_flag else "--{key}"
    for i, a in enumerate(args):
        name, eq, rest = a.partition("=")
        path = rest if eq else (args[i + 1] if i + 1 < len(args) else "")
        if name in CONFIG_FLAGS and Path(path).suffix.lower() in CONFIG_SUFFIXES:
            sources.append((read_config(Path(path), f"given to the script as {name}"), path,
                            dashed))
        elif a.endswith(".py") and not a.startswith("-") and "=" not in a \
                and Path(a).is_file():
            sources.append((read_python_config(Path(a), "a config file in the arguments"), a,
                            "--{key}={{}}"))
    for data, where, style in sources:
        for key, value in _flat(data):
            if knob_name(key) in names and isinstance(value, (int, float)) \
                    and not isinstance(value, bool) and value > 0:
                found = (style.format(key=key), float(value), f"{key} in {where}")
                break
    return found


def _source_flags(tree: ast.Module, names: Sequence[str]) -> list[str]:
    """argparse/click flags of the source whose setting is one of ``names``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) \
                        and a.value.startswith("--") and knob_name(a.value) in names \
                        and a.value not in out:
                    out.append(a.value)
    return out


def length_args(flag: str, value: float, fractional: bool) -> list[str]:
    """The arguments that set the job's length to ``value`` through ``flag`` (a template puts
    the value in place: ``--max_iters={}`` gives ``--max_iters=600``); none for a key inside a
    config file (``cfg.yaml:trainer.max_steps``), which arguments cannot change."""
    text = f"{value:g}" if fractional else str(int(value))
    if parse_form(flag).kind == "file":
        return []
    if "{" in flag:
        return [flag.replace("{}", text)]
    return [flag, text]

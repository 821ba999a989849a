"""How a setting (batch size, epochs, learning rate, workers) reaches a script, in every form.

``--batch-size-arg`` and its siblings (``--epochs-arg``, ``--lr-arg``, ``--workers-arg``) name
the setting in one of these forms, parsed by :func:`parse_form`:

- a flag, ``--batch_size`` (a trial gets ``--batch_size 128``), or a template, ``--bs={}``
  (``--bs=128``), dotted ones included (LightningCLI's ``--data.batch_size``): one given
  before is replaced and the new one goes last, after a positional config file, so that it
  wins. The script's own value: the last one the arguments give, where a ``--config`` YAML/JSON
  (LightningCLI, nested keys) or a positional ``.py`` config (nanoGPT's configurator) also
  counts, in order; else the argparse/click default; else, for a script that ``exec``'s a
  configurator, its module-level global (``batch_size = 12``).
- a Hydra override, ``data.batch_size={}`` or ``+data.batch_size={}`` (no dashes): replaces a
  ``data.batch_size=``/``+…``/``++…`` one (a ``+`` given before is kept: Hydra needs it for a
  key its config lacks). The script's own value: the last override, else the Hydra config
  (``@hydra.main(config_path="conf", config_name="config")`` → ``conf/config.yaml``).
- a key in a YAML/JSON file among the arguments, ``cfg.yaml:train.batch_size``: a trial gets
  the path of a copy of ``cfg.yaml`` with ``train.batch_size`` set, in place of ``cfg.yaml``.
  The script's own value: the key in that file.

A file form's file must be among the script's arguments (alone or as ``--config=cfg.yaml``),
and its key must exist in it; otherwise the error names the file and key. Copies are written
atomically by :func:`~optimizer.trials.settings.config_files.write_copy` into the run folder's
``configs/`` (``TrainingModuleManager.config_copies``); the user's file is never written.

:func:`with_setting` writes a setting into a run's arguments (``runner.with_flag`` is it);
:func:`setting_value` reads the value a run passes, and where it comes from.
"""

from __future__ import annotations

import ast
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizer.foundation.errors import CloudoptError
from optimizer.trials.script_scan import ScriptInfo, flag_default, flag_float_default
from optimizer.trials.settings.config_files import (
    CONFIG_SUFFIXES,
    found,
    hydra_value,
    is_copy_of,
    lookup,
    python_assignments,
    read_config,
    read_python_config,
    typed,
    write_copy,
)

_FILE_FORM = re.compile(r"(?P<file>[^-=].*\.(?:ya?ml|json)):(?P<key>[^:=\s{}]+)",
                        re.IGNORECASE)
CONFIG_FLAGS = ("--config", "-c")
"""LightningCLI's (jsonargparse's) option naming a YAML config; repeatable, later ones win."""


def default_copies() -> Path:
    """Where copies go when no run folder is given (a manager outside a run, a Ray node); one
    folder per user, as another user's would not be writable."""
    return Path(tempfile.gettempdir()) / f"cloudopt-configs-{getattr(os, 'getuid', lambda: 0)()}"


@dataclass(frozen=True)
class SettingForm:
    """One ``--*-arg`` value, parsed.

    ``kind``: ``flag`` (``--bs`` → ``--bs 128``), ``template`` (``--bs={}`` → ``--bs=128``),
    ``override`` (Hydra's ``data.batch_size={}``) or ``file`` (``cfg.yaml:train.batch``).
    ``name``: the flag (``--bs``), the override's key (``data.batch_size``) or the file's key.
    """

    kind: str
    name: str
    template: str = ""
    file: str = ""

    @property
    def key(self) -> str:
        """The setting's name in a config file: ``--data.batch_size`` → ``data.batch_size``."""
        return self.name.lstrip("-")


def parse_form(flag: str) -> SettingForm:
    """The form of ``flag`` (see the module docstring).

    Raises
    ------
    CloudoptError
        An empty value.
    """
    text = flag.strip()
    if not text:
        raise CloudoptError("an empty --*-arg: give a flag (--batch_size), a template "
                            "(--bs={}), a Hydra key (data.batch_size={}) or FILE:KEY")
    m = _FILE_FORM.fullmatch(text)
    if m:
        return SettingForm("file", m["key"], file=m["file"])
    if text.startswith("-"):
        if "{" not in text:
            return SettingForm("flag", text)
        name = text.split("=", 1)[0].split("{", 1)[0]
        return SettingForm("template", name, template=text)
    template = text if "{" in text else text.rstrip("=") + "={}"
    return SettingForm("override", template.split("=", 1)[0].lstrip("+"), template=template)


def _fill(template: str, value: Any) -> str:
    return template.replace("{batch_size}", str(value)).replace("{}", str(value))


def _without_flag(args: Sequence[str], name: str) -> list[str]:
    """``args`` less ``name VALUE`` pairs and ``name=VALUE`` tokens."""
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == name:
            skip = i + 1 < len(args)
            continue
        if a.startswith(name + "="):
            continue
        out.append(a)
    return out


def _override_key(arg: str) -> tuple[str, str] | None:
    """(``+`` prefix, key) of a Hydra ``key=value`` override; None for flags and positionals."""
    if arg.startswith("-") or "=" not in arg:
        return None
    head = arg.split("=", 1)[0]
    key = head.lstrip("+")
    return head[:len(head) - len(key)], key


def with_setting(args: Sequence[str], flag: str, value: Any, copies: Path | None = None
                 ) -> list[str]:
    """``args`` with the setting ``flag`` names set to ``value``, replacing one given.

    ``copies``: where a file form's copy goes (default :func:`default_copies`).

    Raises
    ------
    CloudoptError
        A file form whose file is not among ``args``, is missing, or lacks the key.
    """
    form = parse_form(flag)
    if form.kind == "flag":
        return [*_without_flag(args, form.name), form.name, str(value)]
    if form.kind == "template":
        return [*_without_flag(args, form.name), _fill(form.template, value)]
    if form.kind == "override":
        kept, plus = [], ""
        for a in args:
            given = _override_key(a)
            if given is not None and given[1] == form.name:
                plus = max(plus, given[0], key=len)
                continue
            kept.append(a)
        token = _fill(form.template, value)
        # data.batch_size= fails in Hydra for a key the config lacks; a +key= given kept it in
        return [*kept, token if token.startswith("+") else plus + token]
    places = _file_places(args, form, flag)
    source = Path(places[-1][1])
    copy = write_copy(source, form.key, value, copies or default_copies(), _why(flag),
                      Path(form.file))
    out = list(args)
    for i, given in places:
        out[i] = out[i][:len(out[i]) - len(given)] + str(copy)
    return out


def _why(flag: str) -> str:
    return f"named by {flag}"


def _file_places(args: Sequence[str], form: SettingForm, flag: str) -> list[tuple[int, str]]:
    """(index, path text) of each argument that names the form's file (``cfg.yaml``,
    ``--config=cfg.yaml``, or a copy of it made by an earlier setting)."""
    want = Path(form.file)
    places = []
    for i, a in enumerate(args):
        text = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        p = Path(text)
        if text == form.file or is_copy_of(p, want) or (
                p.suffix == want.suffix and p.name == want.name and _same_file(p, want)):
            places.append((i, text))
    if not places:
        shown = " ".join(args) or "none"
        raise CloudoptError(f"{flag}: {form.file} is not among the script's arguments "
                            f"({shown}); pass it there, e.g. --train-args '--config {form.file}'")
    return places


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


# -- reading the value a run passes ----------------------------------------------------------


@dataclass(frozen=True)
class SettingValue:
    """The value a run passes for a setting, as written (``"64"``, 64, ``"3e-4"``), and where
    it comes from in words (``--bs in the script's arguments``, ``batch_size in
    config/train_x.py``, ``the default of --bs in the script's source``); ``file``: the config
    file it was read from, where one was."""

    value: Any
    source: str
    file: Path | None = None

    @property
    def number(self) -> int | float | None:
        """The value as a number (an ``int`` where it is whole as written), else None."""
        v = typed(self.value)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def whole(self, minimum: int = 1) -> int | None:
        """The value as a whole number of at least ``minimum`` (64 and 64.0, not 64.5), else
        None."""
        n = self.number
        n = int(n) if isinstance(n, float) and n.is_integer() else n
        return n if isinstance(n, int) and n >= minimum else None


def _configurator(tree: ast.Module) -> bool:
    """Whether a script sets its globals from its arguments itself, as nanoGPT's
    ``exec(open('configurator.py').read())`` does: then its module-level globals are its
    defaults and a positional ``.py`` argument is a config file it runs."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and n.func.id in ("exec", "globals") for n in ast.walk(tree))


def _from_args(args: Sequence[str], form: SettingForm, configurator: bool
               ) -> SettingValue | None:
    """The last value ``args`` give a flag/template/override form, config files included."""
    last = None
    for i, a in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        if form.kind == "override":
            given = _override_key(a)
            if given is not None and given[1] == form.name:
                last = SettingValue(a.split("=", 1)[1], f"{a.split('=', 1)[0]} in the "
                                    "script's arguments")
            continue
        if a == form.name and nxt is not None:
            last = SettingValue(nxt, f"{form.name} in the script's arguments")
        elif a.startswith(form.name + "="):
            last = SettingValue(a.split("=", 1)[1], f"{form.name} in the script's arguments")
        elif (a in CONFIG_FLAGS and nxt is not None) or a.split("=", 1)[0] in CONFIG_FLAGS:
            path = Path(nxt if "=" not in a else a.split("=", 1)[1])
            if path.suffix.lower() in CONFIG_SUFFIXES:
                value = lookup(read_config(path, f"given to the script as {a}"), form.key)
                if found(value):
                    last = SettingValue(value, f"{form.key} in {path}", path)
        elif configurator and a.endswith(".py") and not a.startswith("-") and "=" not in a:
            values = read_python_config(Path(a), "a config file in the script's arguments")
            if form.key in values:
                last = SettingValue(values[form.key], f"{form.key} in {a}", Path(a))
    return last


def setting_value(args: Sequence[str], script: ScriptInfo | None, flag: str
                  ) -> SettingValue | None:
    """The value a run with ``args`` passes for the setting ``flag`` names, and its source.

    In order: the last value the arguments give (a flag, a Hydra override, a ``--config`` YAML
    or a nanoGPT positional ``.py`` config, whichever comes last), else the script's own
    default (the argparse/click literal; a configurator script's module-level global; the Hydra
    config), or, for a file form, the key in that file. None when nothing says.

    Raises
    ------
    CloudoptError
        A config file the arguments name that is missing or malformed; a file form whose file
        is not among ``args`` or lacks the key (the message names the file and key).
    """
    form = parse_form(flag)
    if form.kind == "file":
        path = Path(_file_places(args, form, flag)[-1][1])
        value = lookup(read_config(path, _why(flag)), form.key)
        if not found(value):
            raise CloudoptError(f"{path}: no key {form.key} ({_why(flag)})")
        return SettingValue(value, f"{form.key} in {path}", path)
    tree = script.tree if script is not None else None
    configurator = tree is not None and _configurator(tree)
    given = _from_args(list(args), form, configurator)
    if given is not None or script is None:
        return given
    if form.kind == "override":
        hydra = hydra_value(script.path, script.tree, args, form.name)
        return None if hydra is None else SettingValue(hydra[0], f"{form.name} in {hydra[1]}",
                                                       hydra[1])
    literal = flag_default(script.tree, form.name, minimum=0)
    if literal is None:
        literal = flag_float_default(script.tree, form.name)
    if literal is not None:
        return SettingValue(literal, f"the default of {form.name} in the script's source")
    if configurator and form.key.isidentifier():
        values = python_assignments(script.tree)
        if values.get(form.key) is not None:
            return SettingValue(values[form.key], f"{form.key} = … in the script's source")
    return config_class_field(script.tree, form.name)


DATACLASS_PARSERS = ("HfArgumentParser", "simple_parsing", "tyro", "ArgumentParser(dataclass")
"""Parsers that turn dataclass fields into ``--field`` flags: a plain flag's default may be a
field's."""


def field_default(node: ast.AST | None) -> ast.AST | None:
    """The default a class-body annotation gives: ``x: int = 64`` or ``field(default=64)``."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) \
            == "field":
        return next((k.value for k in node.keywords if k.arg == "default"), None)
    return node


def config_class_field(tree: ast.Module, name: str) -> SettingValue | None:
    """The literal default of a setting's field in a config class: a script whose
    ``--trainer.batch_size=`` fills a ``TrainerConfig`` dataclass keeps its default as
    ``batch_size: int = 64`` in that class (the section's name starts the class's name); a
    plain ``--per_device_train_batch_size`` read by ``HfArgumentParser`` is a field of any of
    its dataclasses (``field(default=16)``)."""
    parts = name.lstrip("-+").split(".")
    section = parts[-2].replace("-", "_").lower().replace("_", "") if len(parts) > 1 else None
    key = parts[-1].replace("-", "_")
    if section is None and not any(p in ast.unparse(tree) for p in DATACLASS_PARSERS):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or (
                section is not None
                and not node.name.lower().replace("_", "").startswith(section)):
            continue
        for item in node.body:
            value = field_default(item.value) if isinstance(item, ast.AnnAssign) else None
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                    and item.target.id == key and isinstance(value, ast.Constant) \
                    and isinstance(value.value, (int, float)) \
                    and not isinstance(value.value, bool):
                return SettingValue(value.value, f"{node.name}.{key} in the script's source")
    return None


def arg_or_default(args: Sequence[str], script: ScriptInfo, flag: str,
                   minimum: int = 1) -> int | None:
    """:func:`setting_value` as a whole number of at least ``minimum`` (a batch size; workers
    with ``minimum=0``), else None."""
    found_value = setting_value(args, script, flag)
    return found_value.whole(minimum) if found_value is not None else None

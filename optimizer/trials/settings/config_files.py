"""Config files a training script reads its settings from: read a key, write a copy with one set.

- :func:`read_config` reads a YAML or JSON file into Python values (a missing or malformed file
  is a one-line :class:`~optimizer.foundation.errors.CloudoptError` naming it);
  :func:`lookup` finds a dotted key (``data.batch_size``) in it.
- :func:`python_assignments` reads the top-level ``name = literal`` lines of a Python config
  file (nanoGPT's ``config/train_shakespeare_char.py``) or script, never running it.
- :func:`hydra_value` finds a key's default in a Hydra script's config: the ``conf/config.yaml``
  its ``@hydra.main(config_path=..., config_name=...)`` names, and the group files its
  ``defaults`` list (or a ``group=option`` override) chooses.
- :func:`write_copy` writes a copy of a YAML or JSON file with one key set, atomically, under a
  name that depends on its content; the user's file is only read.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_text
from optimizer.foundation.errors import CloudoptError

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
_MISSING = object()


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:  # a runtime dependency; an install without it says so in one line
        raise CloudoptError("reading a YAML config needs PyYAML: pip install 'pyyaml>=6.0'") \
            from None
    return yaml


def read_config(path: Path, why: str = "") -> Any:
    """The content of a YAML or JSON config file (JSON by its ``.json`` suffix).

    Raises
    ------
    CloudoptError
        Missing, unreadable or malformed file; ``why`` (how the file was named) ends the line.
    """
    note = f" ({why})" if why else ""
    if not path.is_file():
        raise CloudoptError(f"{path}: config file not found{note}")
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            return json.loads(text)
        yaml = _yaml()
        return yaml.safe_load(text)
    except CloudoptError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise CloudoptError(f"{path}: cannot read config file: {_one_line(exc)}{note}") from None
    except Exception as exc:  # yaml.YAMLError, whose class is only known once PyYAML loads
        raise CloudoptError(f"{path}: not valid YAML: {_one_line(exc)}{note}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def lookup(data: Any, key: str) -> Any:
    """The value at dotted ``key`` (``train.batch_size``) in nested mappings; a list index may
    be a part (``stages.0.batch``). ``_MISSING`` when a part is absent."""
    node = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def found(value: Any) -> bool:
    """Whether a :func:`lookup` found its key."""
    return value is not _MISSING


def _set(data: Any, key: str, value: Any) -> bool:
    """Set dotted ``key`` in place where it already exists; False when it does not."""
    parent, _, last = key.rpartition(".")
    node = lookup(data, parent) if parent else data
    if isinstance(node, dict) and last in node:
        node[last] = value
        return True
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
        return True
    return False


def typed(value: Any) -> Any:
    """A value as a config file should hold it: ``"128"`` → 128, ``"3e-04"`` → 0.0003 (a
    learning rate cloudopt formats as text), anything else as given."""
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        try:
            return float(text)
        except ValueError:
            return value
    return value


def write_copy(source: Path, key: str, value: Any, folder: Path, why: str = "",
               original: Path | None = None) -> Path:
    """A copy of the YAML/JSON file ``source`` with ``key`` set to ``value``, in ``folder``.

    The copy is named ``<stem>-<first 10 hex digits of its content's SHA-256><suffix>`` after
    ``original`` (default ``source``; a copy of a copy keeps the user's file's name): the same
    setting always gives the same path (a recorded trial's command line stays comparable) and
    rewriting it is harmless. Written atomically; ``source`` is only read.

    Raises
    ------
    CloudoptError
        ``source`` missing or malformed, or ``key`` absent from it (a new key would be a
        setting the script may not read, so it is refused rather than guessed).
    """
    data = read_config(source, why)
    if not _set(data, key, typed(value)):
        raise CloudoptError(f"{source}: no key {key} to set ({why})" if why
                            else f"{source}: no key {key} to set")
    if source.suffix.lower() == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        text = _yaml().safe_dump(data, sort_keys=False, default_flow_style=False)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
    named = original or source
    path = folder / f"{named.stem}-{digest}{named.suffix}"
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        atomic_write_text(path, text)
    return path


def is_copy_of(path: Path, original: Path) -> bool:
    """Whether ``path`` is a copy :func:`write_copy` made of ``original`` (so that a second
    setting in the same file, a learning rate after a batch size, is set in that copy)."""
    pattern = re.escape(original.stem) + r"-[0-9a-f]{10}" + re.escape(original.suffix)
    return re.fullmatch(pattern, path.name) is not None


def python_assignments(tree: ast.Module) -> dict[str, Any]:
    """The top-level ``name = literal`` assignments of a Python file, later ones winning (a
    value that is not a literal, ``n_embd = 64 * 6``, counts as unknown: None)."""
    out: dict[str, Any] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    out[target.id] = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    out[target.id] = None
    return out


def read_python_config(path: Path, why: str = "") -> dict[str, Any]:
    """:func:`python_assignments` of the Python config file at ``path``.

    Raises
    ------
    CloudoptError
        Missing, unreadable or not Python (the message names the file and line).
    """
    note = f" ({why})" if why else ""
    if not path.is_file():
        raise CloudoptError(f"{path}: config file not found{note}")
    try:
        return python_assignments(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    except SyntaxError as exc:
        raise CloudoptError(f"{path}:{exc.lineno}: syntax error in config file: {exc.msg}{note}") \
            from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CloudoptError(f"{path}: cannot read config file: {_one_line(exc)}{note}") from None


# -- Hydra ------------------------------------------------------------------------------------


def _hydra_main(tree: ast.Module) -> dict[str, Any] | None:
    """The literal keywords of a ``@hydra.main(...)`` decorator (``config_path``,
    ``config_name``), or None when the script has none."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            func = deco.func if isinstance(deco, ast.Call) else deco
            if (isinstance(func, ast.Attribute) and func.attr == "main"
                    and isinstance(func.value, ast.Name) and func.value.id == "hydra"):
                kw = {k.arg: k.value for k in getattr(deco, "keywords", []) if k.arg}
                return {k: v.value for k, v in kw.items() if isinstance(v, ast.Constant)}
    return None


def _hydra_option(args: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The last value of Hydra's own ``--config-name``/``-cn`` style option in ``args``."""
    value = None
    for i, a in enumerate(args):
        name, eq, rest = a.partition("=")
        if name in names:
            value = rest if eq else (args[i + 1] if i + 1 < len(args) else value)
    return value


def hydra_primary(script_path: Path, tree: ast.Module, args: Sequence[str]
                  ) -> tuple[Any, Path] | None:
    """A Hydra script's primary config and its file (``<script folder>/<config_path>/
    <config_name>.yaml``, or the ``--config-path``/``--config-name`` given in ``args``); None
    when the script has no ``@hydra.main`` with a ``config_name``."""
    main = _hydra_main(tree)
    if main is None:
        return None
    name = _hydra_option(args, ("--config-name", "-cn")) or main.get("config_name")
    folder = _hydra_option(args, ("--config-path", "-cp")) or main.get("config_path")
    if not name or folder is None:
        return None
    root = (script_path.parent / folder) if not Path(folder).is_absolute() else Path(folder)
    primary = root / f"{name}.yaml" if not str(name).endswith(".yaml") else root / name
    return read_config(primary, f"the config of @hydra.main in {script_path.name}"), primary


def hydra_value(script_path: Path, tree: ast.Module, args: Sequence[str], key: str
                ) -> tuple[Any, Path] | None:
    """The default of dotted ``key`` in a Hydra script's config, and the file that holds it;
    None when the script has no ``@hydra.main`` with a ``config_name``, or no file sets it.

    The primary config (``<script folder>/<config_path>/<config_name>.yaml``, or the
    ``--config-path``/``--config-name`` given in ``args``) wins, as Hydra's ``_self_`` does by
    default; else the group file its ``defaults`` list chooses for the key's first part
    (``- data: mnist`` → ``data/mnist.yaml``), or the one a ``data=cifar`` override chooses.
    """
    found_primary = hydra_primary(script_path, tree, args)
    if found_primary is None:
        return None
    data, primary = found_primary
    root = primary.parent
    value = lookup(data, key)
    if found(value):
        return value, primary
    group, _, rest = key.partition(".")
    option = None
    for entry in (data or {}).get("defaults", []) if isinstance(data, dict) else []:
        if isinstance(entry, dict) and group in entry:
            option = entry[group]
    for a in args:  # a group chosen on the command line replaces the defaults list's choice
        k, eq, v = a.lstrip("+").partition("=")
        if eq and k == group:
            option = v
    if not rest or not isinstance(option, str):
        return None
    group_file = root / group / f"{option}.yaml"
    if not group_file.is_file():
        return None
    value = lookup(read_config(group_file), rest)
    return (value, group_file) if found(value) else None

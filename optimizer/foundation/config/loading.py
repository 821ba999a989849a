"""The whole configuration, one section per concern, read from TOML and validated.

:func:`load_config` reads ``configs/default.toml`` (or a given file), lays the command line's
overrides over it and builds each section's dataclass, whose ``__post_init__`` validates it;
the file name is added to any error, so a bad key reads ``configs/x.toml: [sla].time_max must
be > 0 (got -1)``, and an unknown section or key is named with the known ones. The shipped
configurations are found in the repository or the installed wheel (:func:`configs_dir`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.foundation.config.agents import MultiObjectiveConfig, RLConfig
from optimizer.foundation.config.resources import ResourceConfig
from optimizer.foundation.config.run import RunConfig
from optimizer.foundation.config.sla import SLAConfig
from optimizer.foundation.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[3]


def configs_dir() -> Path:
    """The shipped configurations: the repository's ``configs/`` (the one copy), reached as
    the package data ``optimizer.configs`` where cloudopt is installed (setup.py maps it), else
    beside the sources (a checkout on ``PYTHONPATH``)."""
    try:
        spec = importlib.util.find_spec("optimizer.configs")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "default.toml").is_file():
            return Path(location)
    return REPO_ROOT / "configs"


CONFIG_DIR = configs_dir()
DEFAULT_CONFIG = CONFIG_DIR / "default.toml"


@dataclass
class OptimizerConfig:
    """The whole configuration, one section per concern."""

    sla: SLAConfig = field(default_factory=SLAConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    multi_objective: MultiObjectiveConfig = field(default_factory=MultiObjectiveConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | os.PathLike) -> None:
        """Write the resolved configuration as JSON (atomically)."""
        from optimizer.foundation.atomic_files import atomic_write_json

        atomic_write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> OptimizerConfig:
        return _build_config(data, source)


SECTIONS: dict[str, type] = {
    "sla": SLAConfig,
    "resources": ResourceConfig,
    "rl": RLConfig,
    "multi_objective": MultiObjectiveConfig,
    "run": RunConfig,
}


def _coerce(value: Any, ftype: Any) -> Any:
    # TOML gives ints where floats are meant (time_max = 3600); accept them.
    if ftype in ("float", float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if ftype in ("float | None",) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _build_section(cls: type, table: Any, section: str, source: str) -> Any:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: [{section}] must be a table (got {table!r})")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ConfigError(
            f"{source}: unknown key [{section}].{unknown[0]}; known keys: {', '.join(fields)}"
        )
    kwargs = {k: _coerce(v, fields[k].type) for k, v in table.items()}
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except TypeError as exc:  # pragma: no cover - defensive
        raise ConfigError(f"{source}: [{section}] {exc}") from None


def _build_config(data: Mapping[str, Any], source: str) -> OptimizerConfig:
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ConfigError(
            f"{source}: unknown section [{unknown[0]}]; known sections: {', '.join(SECTIONS)}"
        )
    parts = {name: _build_section(cls, data.get(name, {}), name, source)
             for name, cls in SECTIONS.items()}
    return OptimizerConfig(**parts)


def _merge(base: dict[str, Any], overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in base.items()}
    for section, values in overrides.items():
        out.setdefault(section, {})
        if not isinstance(out[section], dict):
            out[section] = {}
        out[section].update({k: v for k, v in values.items() if v is not None})
    return out


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: configuration file not found")
    try:
        with open(p, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None


def load_config(
    path: str | os.PathLike | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> OptimizerConfig:
    """Load a configuration: ``configs/default.toml`` (or ``path``), then ``overrides``.

    ``overrides`` maps a section to keys, as the command line gives them
    (``{"sla": {"time_max": 600}}``); ``None`` values are ignored. Errors name the file and key.
    """
    source = Path(path) if path is not None else DEFAULT_CONFIG
    data = read_toml(source) if source.exists() or path is not None else {}
    if overrides:
        data = _merge(data, overrides)
        source_name = f"{source} (with command-line overrides)"
    else:
        source_name = str(source)
    return _build_config(data, source_name)


__all__ = ["CONFIG_DIR", "DEFAULT_CONFIG", "REPO_ROOT", "SECTIONS", "OptimizerConfig",
           "configs_dir", "load_config", "read_toml"]

"""Typed configuration: SLA, resources and prices, the agents' settings, runs.

One dataclass per concern, each in its own module, loaded from TOML whose sections and keys
mirror the fields (``[sla] time_max = 3600``): :mod:`~optimizer.foundation.config.sla`
(``[sla]``), :mod:`~optimizer.foundation.config.resources` (``[resources]``),
:mod:`~optimizer.foundation.config.agents` (``[rl]``, ``[multi_objective]``),
:mod:`~optimizer.foundation.config.run` (``[run]``). Values are validated in
``__post_init__``; :mod:`~optimizer.foundation.config.loading` holds the whole
:class:`OptimizerConfig` and reads it (:func:`load_config` adds the file name to any error, so
a bad key reads ``configs/x.toml: [sla].time_max must be > 0 (got -1)``). The resolved
configuration is saved beside each run as JSON. Every public name is importable from here.
"""

from optimizer.foundation.config.agents import MultiObjectiveConfig, RLConfig
from optimizer.foundation.config.loading import (
    CONFIG_DIR,
    DEFAULT_CONFIG,
    REPO_ROOT,
    SECTIONS,
    OptimizerConfig,
    configs_dir,
    load_config,
    read_toml,
)
from optimizer.foundation.config.resources import ResourceConfig
from optimizer.foundation.config.run import RunConfig
from optimizer.foundation.config.sla import SLAConfig
from optimizer.foundation.preferences import validate_preference

__all__ = ["CONFIG_DIR", "DEFAULT_CONFIG", "REPO_ROOT", "SECTIONS", "MultiObjectiveConfig",
           "OptimizerConfig", "RLConfig", "ResourceConfig", "RunConfig", "SLAConfig",
           "configs_dir", "load_config", "read_toml",
           "validate_preference"]

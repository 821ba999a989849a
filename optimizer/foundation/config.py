"""Typed configuration: SLA, resources and prices, RL and multi-objective settings.

One dataclass per concern, loaded from TOML whose sections and keys mirror the fields
(``[sla] time_max = 3600``). Values are validated in ``__post_init__``; :func:`load_config`
adds the file name to any error, so a bad key reads ``configs/x.toml: [sla].time_max must
be > 0 (got -1)``. The resolved configuration is saved beside each run as JSON.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.errors import ConfigError
from optimizer.foundation.errors import check as _check
from optimizer.foundation.forecast import forecast_trend, history_column
from optimizer.foundation.machine import detect_cpu_count, detect_gpu_count, detect_memory_gb
from optimizer.foundation.preferences import default_preferences as _default_preferences
from optimizer.foundation.preferences import validate_preference

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[2]


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


# --------------------------------------------------------------------------------------------
# SLA
# --------------------------------------------------------------------------------------------

@dataclass
class SLAConfig:
    """Service-level agreement of a training job. A limit of 0 for a minimum means 'none'."""

    time_max: float = 3600.0
    """Maximum wall time of the whole job, seconds."""
    cost_max: float = 10.0
    """Maximum cost of the whole job, dollars."""
    throughput_min: float = 0.0
    """Minimum training throughput, samples per second."""
    memory_max: float = 0.0
    """Maximum resident memory, GB; 0 means the machine's memory."""
    gpu_util_min: float = 0.0
    """Minimum mean GPU utilisation, percent (checked only when GPUs are allocated)."""
    cpu_util_min: float = 0.0
    """Minimum mean CPU utilisation of the allocated cores, percent."""

    def __post_init__(self) -> None:
        if self.memory_max == 0.0:
            self.memory_max = detect_memory_gb()
        for name in ("time_max", "cost_max", "memory_max"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"[sla].{name}", "must be > 0", v)
        for name in ("throughput_min", "gpu_util_min", "cpu_util_min"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v >= 0, f"[sla].{name}", "must be >= 0", v)
        for name in ("gpu_util_min", "cpu_util_min"):
            v = getattr(self, name)
            _check(v <= 100, f"[sla].{name}", "is a percentage and must be <= 100", v)

    @staticmethod
    def _get_current_gpu_utilization() -> float | None:
        """Mean utilisation (%) of the visible GPUs through NVML, or None without GPUs."""
        from optimizer.foundation.gpu import gpu_utilization

        utils = gpu_utilization()
        return float(np.mean(utils)) if utils else None

    def forecast_sla_values(self, history: Any) -> dict[str, float]:
        """Predict the next job's time (s), cost ($) and throughput (samples/s) from run records.

        ``history`` is a DataFrame or a list of run-record dicts in chronological order, with
        columns such as ``wall_time_s``, ``cost`` and ``throughput`` (aliases accepted). Each
        metric is forecast by :func:`forecast_trend`; the result also carries ``<metric>_se``,
        the standard error, and ``n_runs``.
        """
        out: dict[str, float] = {}
        n = 0
        for name in ("time", "cost", "throughput"):
            values = history_column(history, name)
            finite = values[np.isfinite(values)]
            n = max(n, len(finite))
            if len(finite) == 0:
                continue
            out[name], out[f"{name}_se"] = forecast_trend(values)
            if out[name] <= 0 and (finite > 0).all():
                # A falling line crossed zero; time, cost and throughput are positive, so
                # extrapolate the trend in log space instead (a steady relative decline).
                log_mean, log_se = forecast_trend(np.log(values))
                out[name] = float(np.exp(log_mean))
                out[f"{name}_se"] = out[name] * log_se if math.isfinite(log_se) else math.inf
        if not out:
            raise ConfigError(
                "cannot forecast SLA values: the history has no time, cost or throughput column"
            )
        out["n_runs"] = float(n)
        return out

    def update_from_baseline_history(self, history: Any, margin: float = 0.2) -> dict[str, float]:
        """Set time, cost and throughput limits from the forecast, with a relative ``margin``.

        Limits become forecast × (1 + margin) for time and cost and forecast × (1 - margin) for
        throughput. Returns the forecast used.
        """
        if not 0 <= margin < 1:
            raise ConfigError(f"margin must be in [0, 1) (got {margin!r})")
        fc = self.forecast_sla_values(history)
        if fc.get("time", 0) > 0:
            self.time_max = fc["time"] * (1 + margin)
        if fc.get("cost", 0) > 0:
            self.cost_max = fc["cost"] * (1 + margin)
        if fc.get("throughput", 0) > 0:
            self.throughput_min = fc["throughput"] * (1 - margin)
        return fc


# --------------------------------------------------------------------------------------------
# Resources and prices
# --------------------------------------------------------------------------------------------


@dataclass
class ResourceConfig:
    """Resource bounds and prices. ``None`` bounds are detected from the machine.

    Default prices are on-demand list prices of a common cloud (per vCPU-hour, per GB-hour of
    memory and per V100-hour); set your own in TOML.
    """

    gpu_count_min: int = 0
    gpu_count_max: int | None = None
    cpu_count_min: int = 1
    cpu_count_max: int | None = None
    memory_min: float = 0.5
    memory_max: float | None = None
    cost_per_gpu_hour: float = 2.48
    cost_per_cpu_hour: float = 0.0316
    cost_per_gb_hour: float = 0.0042
    memory_step: float = 1.0
    """GB added or removed by one memory action."""
    batch_size_max: int | None = None
    """Largest batch size a trial or a plan may use (None: no bound). Probes and plans step
    past the measured batch sizes; a much larger batch also changes the optimisation, which
    cloudopt does not judge, so a user who knows where convergence suffers sets this."""

    def __post_init__(self) -> None:
        if self.gpu_count_max is None:
            self.gpu_count_max = detect_gpu_count()
        if self.cpu_count_max is None:
            self.cpu_count_max = detect_cpu_count()
        if self.memory_max is None:
            self.memory_max = detect_memory_gb()
        for name in ("gpu_count_min", "gpu_count_max", "cpu_count_min", "cpu_count_max"):
            v = getattr(self, name)
            _check(isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                   f"[resources].{name}", "must be a non-negative integer", v)
        _check(self.cpu_count_min >= 1, "[resources].cpu_count_min", "must be >= 1",
               self.cpu_count_min)
        v = self.batch_size_max
        _check(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
               "[resources].batch_size_max", "must be a positive integer", v)
        for name in ("memory_min", "memory_max", "memory_step"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"[resources].{name}", "must be > 0", v)
        for lo, hi in (("gpu_count_min", "gpu_count_max"), ("cpu_count_min", "cpu_count_max"),
                       ("memory_min", "memory_max")):
            _check(getattr(self, lo) <= getattr(self, hi), f"[resources].{lo}",
                   f"must be <= {hi} = {getattr(self, hi)!r}", getattr(self, lo))
        for name in ("cost_per_gpu_hour", "cost_per_cpu_hour", "cost_per_gb_hour"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v >= 0, f"[resources].{name}",
                   "is a price and must be >= 0", v)

    def prices(self) -> dict[str, float]:
        return {"gpu": self.cost_per_gpu_hour, "cpu": self.cost_per_cpu_hour,
                "memory": self.cost_per_gb_hour}


# --------------------------------------------------------------------------------------------
# Reinforcement learning
# --------------------------------------------------------------------------------------------


@dataclass
class RLConfig:
    """Hyper-parameters of the agents."""

    hidden_dim: int = 128
    """Width of each hidden layer of the actor, critic and policy networks."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Soft-update rate of the target networks."""
    lr_actor: float = 3e-4
    lr_critic: float = 1e-3
    batch_size: int = 64
    """Minibatch size sampled from the replay buffer."""
    buffer_size: int = 100_000
    exploration_noise: float = 0.1
    """Probability of a uniformly random action while training (epsilon)."""
    train_freq: int = 1
    """Environment steps between gradient updates."""
    reset_interval: int = 50
    """Consecutive SLA-violating steps after which a critic may be re-initialised."""
    reset_probability: float = 0.1
    """Probability of re-initialising the critic once ``reset_interval`` is reached."""
    dropout_rate: float = 0.1
    entropy_coef: float = 0.01
    actor_activation: str = "relu"
    """Hidden-layer activation of the multi-objective agent's actors: ``"relu"`` (the design)
    or ``"tanh"`` (the usual choice for policy-gradient actors, e.g. PPO's and A2C's)."""
    episodes: int = 300
    """Training episodes per agent."""
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden_dim", "batch_size", "buffer_size", "train_freq", "reset_interval",
                     "episodes"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 1, f"[rl].{name}", "must be a positive integer", v)
        for name in ("gamma", "tau", "exploration_noise", "reset_probability", "dropout_rate"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and 0 <= v <= 1, f"[rl].{name}",
                   "must be in [0, 1]", v)
        _check(self.dropout_rate < 1, "[rl].dropout_rate", "must be < 1", self.dropout_rate)
        for name in ("lr_actor", "lr_critic"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"[rl].{name}", "must be > 0", v)
        _check(self.entropy_coef >= 0, "[rl].entropy_coef", "must be >= 0", self.entropy_coef)
        _check(self.actor_activation in ("relu", "tanh"), "[rl].actor_activation",
               "must be 'relu' or 'tanh'", self.actor_activation)


@dataclass
class MultiObjectiveConfig:
    """Preference vectors over (cost, time, resource); one actor/critic pair each."""

    preference_vectors: dict[str, list[float]] = field(default_factory=_default_preferences)
    num_policies: int = 0
    """Number of policies; 0 means one per preference vector."""

    def __post_init__(self) -> None:
        if not isinstance(self.preference_vectors, Mapping) or not self.preference_vectors:
            raise ConfigError(
                "[multi_objective].preference_vectors must be a table of name = [cost, time, "
                f"resource] (got {self.preference_vectors!r})"
            )
        for name, vec in self.preference_vectors.items():
            self.preference_vectors[name] = list(validate_preference(
                vec, f"[multi_objective.preference_vectors].{name}"))
        if self.num_policies == 0:
            self.num_policies = len(self.preference_vectors)
        _check(self.num_policies == len(self.preference_vectors),
               "[multi_objective].num_policies",
               f"must equal the number of preference vectors ({len(self.preference_vectors)})",
               self.num_policies)

    @property
    def names(self) -> list[str]:
        return list(self.preference_vectors)

    def vector(self, preference: str | Sequence[float]) -> np.ndarray:
        """The weight vector of a named preference, or an explicit vector validated."""
        if isinstance(preference, str):
            if preference not in self.preference_vectors:
                raise ConfigError(
                    f"unknown preference {preference!r}; choose one of "
                    f"{', '.join(self.preference_vectors)} or give three weights summing to 1"
                )
            return np.array(self.preference_vectors[preference], dtype=float)
        return np.array(validate_preference(preference, "preference"), dtype=float)


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------


@dataclass
class RunConfig:
    """How trials are run and recorded."""

    baseline_samples: int = 4
    """Configurations measured for real before the agents are trained."""
    probe_seconds: float = 20.0
    """Time box of one trial; a script still running then is stopped and recorded as a probe."""
    in_process_probe: bool = True
    """Load cloudopt's probe into each trial's Python process (``optimizer.trials.probe``):
    optimizer steps, samples, epochs, loss and stages of an unmodified PyTorch script."""
    trial_timeout_s: float = 600.0
    """Hard limit of one trial: a script past it is a failed trial (timeout)."""
    monitor_interval: float = 0.5
    """Seconds between samples of the process tree."""
    output_dir: str = "runs"
    seed: int = 0
    agent_seconds: float = 25.0
    """Training budget of each agent in the main job, seconds (half of it in later rounds)."""
    agent_episodes: int = 0
    """0: the agents train for ``agent_seconds``; N: for N episodes each whatever the time
    (half in later rounds), so that a seeded run, a replayed one, repeats exactly."""
    refine_rounds: int = 3
    """Closed-loop rounds after the baseline: each measures one allocation (the agents' plan,
    or the one with the largest expected improvement), refits and re-plans; 0 measures the
    first plan only."""
    runoff_rounds: int = 3
    """Rounds of the closing run-off, in which the settings that measured close are run again
    back to back (``optimizer/search/runoff.py``); a contender separated from the leader after two
    leaves. 0 skips the run-off: the final choice is then made over all trials as measured."""
    runoff_size: int = 3
    """At most this many settings (the best ones) go to the run-off."""
    budget: int | str = 12
    """Real runs the whole search may make (probes, whole runs, rounds, sweeps, run-off); 0: no
    limit; ``"auto"``: as many as cost at most ``budget_share`` of the job (``search/budget.py``)."""
    budget_share: float = 0.10
    goodput: bool = True
    """Batch sizes by goodput (samples/s x measured efficiency); false: samples/s alone."""
    job_runs: int = 100
    """Runs of the job the recommendation will serve: a closed-loop run whose expected saving
    over them is less than the run costs is not made (``search/refine.py``; 0: never stop so)."""
    refine_tolerance: float = 0.10
    """Prediction and measurement agree when their throughputs differ by at most this share;
    agreement on the best measured allocation ends the loop early."""
    sla_from_baseline: bool = True
    """Set the time and cost limits not given on the command line from the baseline trials
    (their forecast + 25%), so the reward weighs allocations against this job's own scale."""
    executor: str = "local"
    """Where trials run: ``local`` (subprocesses, one after another) or ``ray`` (Ray tasks,
    side by side where they fit; ``pip install 'cloudopt[ray]'``)."""
    ray_address: str = ""
    """With ``executor = "ray"``: the cluster to join (``auto``, ``ray://head:10001``); empty
    starts a local Ray sized to this machine."""

    def __post_init__(self) -> None:
        _check(isinstance(self.baseline_samples, int) and self.baseline_samples >= 1,
               "[run].baseline_samples", "must be a positive integer", self.baseline_samples)
        for name in ("refine_rounds", "runoff_rounds", "job_runs", "agent_episodes"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 0, f"[run].{name}", "must be a whole number >= 0", v)
        _check(self.budget == "auto" or (isinstance(self.budget, int) and self.budget >= 0),
               "[run].budget", 'must be a whole number >= 0 or "auto"', self.budget)
        _check(isinstance(self.goodput, bool), "[run].goodput", "must be a boolean", self.goodput)
        _check(isinstance(self.budget_share, (int, float)) and 0 < self.budget_share <= 10,
               "[run].budget_share", "must be a share > 0 (0.1 = 10%)", self.budget_share)
        _check(isinstance(self.runoff_size, int) and self.runoff_size >= 2,
               "[run].runoff_size", "must be a whole number >= 2", self.runoff_size)
        _check(isinstance(self.refine_tolerance, (int, float)) and self.refine_tolerance > 0,
               "[run].refine_tolerance", "must be a positive share", self.refine_tolerance)
        _check(self.executor in ("local", "ray") or str(self.executor).startswith("replay:"),
               "[run].executor", 'must be "local", "ray" or "replay:DIR"', self.executor)
        _check(isinstance(self.ray_address, str), "[run].ray_address", "must be a string",
               self.ray_address)
        for name in ("probe_seconds", "trial_timeout_s", "monitor_interval", "agent_seconds"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"[run].{name}", "must be > 0", v)


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


"""The environment's exact model: every prediction as numpy tables, shared by ``step()`` and DP.

Like FrozenLake's ``P``, :class:`EnvModel` holds the whole (noise-free) MDP of a
:class:`envs.EnvConfig`: the state is ``(step k, allocation a)``; an action moves ``a`` to
``next_index[a, u]``; the phase of step ``k`` is ``step_phase[k]``; the reward, reward vector,
step time and cost of running chunk ``k`` at ``a'`` are ``reward[p, a', changed]`` etc., where
``changed`` is 1 when the allocation moved (a restart). ``oom[p, a']`` ends the episode.
:class:`envs.CloudEnvironment` and :mod:`envs.oracle` both read these tables.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.actions import ResourceAction, ResourceGrid, powers_of_two
from envs.state import CloudEnvironmentState
from envs.workload import PhaseSpec, WorkloadModel, phase_sequence, phases_from_prototype
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import MultiObjectiveConfig, ResourceConfig, SLAConfig
from optimizer.foundation.errors import ConfigError

REWARD_NAMES = ("cost", "time", "efficiency", "sla")


@dataclass
class EnvConfig:
    """Everything that defines a :class:`envs.CloudEnvironment`; ``None`` takes the preset's value."""

    workload: str | WorkloadModel = "resnet50-v100"
    """Preset name in ``configs/workloads`` (or a path), or a (fitted) :class:`WorkloadModel`."""
    preference: str | Sequence[float] = "balanced"
    """Name in ``preferences`` or explicit (cost, time, resource) weights summing to 1."""
    sla: SLAConfig | None = None
    resources: ResourceConfig | None = None
    n_steps: int | None = None
    """Adjustment intervals per job: the job's work is split into this many equal chunks."""
    total_samples: float | None = None
    """Work of the job in samples at the workload's reference batch size."""
    restart_s: float | None = None
    """Time lost to a restart when the allocation changes, s."""
    cpu_step: int | None = None
    """CPU threads added or removed by one CPU action."""
    batch_sizes: Sequence[int] | None = None
    """Batch sizes offered (default: powers of two within the preset's bounds)."""
    initial: Allocation | None = None
    """Allocation at the start of every episode (snapped to the grid)."""
    phase_sequence: Sequence[tuple[int, float]] | Sequence[PhaseSpec] | None = None
    """Phases replacing the preset's: ``(phase_id, fraction)`` pairs (a phase detector
    prototype) or :class:`PhaseSpec` objects (e.g. from :func:`envs.workload.phases_from_labels`)."""
    phase_scales: Mapping[int, tuple[float, float]] | None = None
    """``(cpu_scale, mem_scale)`` per phase id for ``phase_sequence``."""
    batch_actions: bool = True
    """81 actions (with batch halve/keep/double); False gives the design's 27."""
    noise: float = 0.0
    """Sigma of mean-one log-normal noise on each step's throughput (0: deterministic)."""
    sla_weight: float = 1.0
    """Weight of the SLA component in the scalar reward."""
    change_penalty: float = 0.02
    """Reward subtracted for each change of allocation (besides the restart time and cost)."""
    oom_penalty: float = 1.0
    """SLA component on out of memory, per step left in the job (incl. the failed one)."""
    max_phases: int | None = None
    """Length of the phase one-hot; None: 4, or the number of distinct phases when larger (so
    the observation has the same shape across the presets)."""
    preferences: MultiObjectiveConfig | None = None
    """Named preference vectors (default: those of ``MultiObjectiveConfig``)."""

    def replace(self, **changes: Any) -> EnvConfig:
        """A copy with some fields changed (unknown names are a :class:`ConfigError`)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(
                f"unknown environment option {unknown[0]!r}; known: {', '.join(sorted(known))}"
            )
        return dataclasses.replace(self, **changes)


@dataclass
class Resolved:
    """An :class:`EnvConfig` with every value filled in."""

    workload: WorkloadModel
    weights: np.ndarray
    sla: SLAConfig
    resources: ResourceConfig
    grid: ResourceGrid
    actions: ResourceAction
    phases: list[PhaseSpec]
    n_steps: int
    total_samples: float
    restart_s: float
    initial: int
    max_phases: int
    config: EnvConfig


def _section(meta: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = meta.get(name, {})
    if not isinstance(value, Mapping):
        raise ConfigError(f"preset section [{name}] must be a table (got {value!r})")
    return dict(value)


def resolve(config: EnvConfig) -> Resolved:
    """Fill ``config`` from its workload preset and validate it."""
    wl = config.workload
    model = wl if isinstance(wl, WorkloadModel) else WorkloadModel.from_preset(wl)
    meta = model.meta
    job, grid_meta = _section(meta, "job"), _section(meta, "grid")
    sla = config.sla or SLAConfig(**{k: float(v) for k, v in _section(meta, "sla").items()})
    res = config.resources or ResourceConfig(**_section(meta, "resources"))
    prefs = config.preferences or MultiObjectiveConfig()
    weights = prefs.vector(config.preference)
    gpu_range = _gpu_range(model, res)
    batches = config.batch_sizes or powers_of_two(
        int(grid_meta.get("batch_min", 64)), int(grid_meta.get("batch_max", 64))
    )
    grid = ResourceGrid.from_config(
        res,
        cpu_step=int(config.cpu_step or grid_meta.get("cpu_step", 1)),
        batch_sizes=batches,
        gpu_range=gpu_range,
    )
    actions = ResourceAction(res, grid, batch_actions=config.batch_actions)
    if config.phase_sequence is None:
        phases = list(model.phases)
    elif all(isinstance(p, PhaseSpec) for p in config.phase_sequence):
        phases = list(config.phase_sequence)
    else:
        phases = phases_from_prototype(config.phase_sequence, config.phase_scales or model.phases)
    n_steps = int(config.n_steps or job.get("n_steps", 20))
    total = float(config.total_samples or job.get("total_samples", 1e6))
    restart = float(config.restart_s if config.restart_s is not None else job.get("restart_s", 0.0))
    if config.initial is not None:
        init = config.initial
    elif job.get("initial"):
        init = Allocation(**job["initial"])
    else:
        init = grid.allocation(0)
    _validate(config, n_steps, total, restart, phases)
    n_ids = len({p.phase_id for p in phases})
    max_phases = config.max_phases if config.max_phases is not None else max(4, n_ids)
    return Resolved(
        model,
        weights,
        sla,
        res,
        grid,
        actions,
        phases,
        n_steps,
        total,
        restart,
        grid.index_of(init),
        max_phases,
        config,
    )


def _gpu_range(model: WorkloadModel, res: ResourceConfig) -> tuple[int, int]:
    if model.params.device == "cpu":
        return (0, 0)  # GPUs would only add cost to a CPU-only job
    lo, hi = max(res.gpu_count_min, 1), res.gpu_count_max
    fitted = model.meta.get("fitted_gpu_range")
    if fitted:
        lo, hi = max(lo, int(fitted[0])), min(hi, int(fitted[1]))
    if hi < lo:
        raise ConfigError(
            f"workload {model.name!r} runs on GPUs but the resource bounds allow "
            f"{res.gpu_count_min}..{res.gpu_count_max} GPUs (need at least 1"
            + (f", fitted range {fitted}" if fitted else "")
            + ")"
        )
    return (lo, hi)


def _validate(
    config: EnvConfig, n_steps: int, total: float, restart: float, phases: list[PhaseSpec]
) -> None:
    if n_steps < 1:
        raise ConfigError(f"n_steps must be >= 1 (got {n_steps!r})")
    if not total > 0:
        raise ConfigError(f"total_samples must be > 0 (got {total!r})")
    for name in ("noise", "sla_weight", "change_penalty", "oom_penalty"):
        if not getattr(config, name) >= 0:
            raise ConfigError(f"{name} must be >= 0 (got {getattr(config, name)!r})")
    if restart < 0:
        raise ConfigError(f"restart_s must be >= 0 (got {restart!r})")
    ids = sorted({p.phase_id for p in phases})
    if config.max_phases is not None and len(ids) > config.max_phases:
        raise ConfigError(f"{len(ids)} distinct phases but max_phases = {config.max_phases}")


def reward_components(
    step_time: Any,
    step_cost: Any,
    util_score: Any,
    sla_rate: Any,
    time_budget: float,
    cost_budget: float,
) -> np.ndarray:
    """Reward vector ``(cost, time, efficiency, sla)``, shape ``(..., 4)``.

    cost and time are ``1 - used / pro-rata budget`` clipped to [-1, 1] (positive within budget;
    summed over the job they give ``n_steps * (1 - total / limit)``); efficiency is the mean
    utilisation of the allocated resources in [0, 1]; sla is minus the share of the checked SLAs
    violated in the interval, in [-1, 0].
    """
    cols = [
        np.clip(1.0 - np.asarray(step_cost) / cost_budget, -1.0, 1.0),
        np.clip(1.0 - np.asarray(step_time) / time_budget, -1.0, 1.0),
        np.asarray(util_score, float),
        np.asarray(sla_rate, float) - 1.0,
    ]
    shape = np.broadcast(*cols).shape
    return np.stack([np.broadcast_to(c, shape) for c in cols], axis=-1)


class EnvModel:
    """Numpy tables of the noise-free MDP of one :class:`EnvConfig` (see the module docstring).

    Attributes (``P`` phases in the sequence, ``A`` allocations, ``U`` actions, ``N`` steps)
    ----------
    next_index : (A, U) int64
    step_phase : (N,) int64, index into ``phases``
    oom : (P, A) bool
    step_time, step_cost, reward : (P, A, 2) float64, last axis ``changed``
    reward_vector : (P, A, 2, 4) float64
    obs : (P, A, 2, D) float32 rows with progress, spend and phase entries left at 0
    goodput, hourly_cost : (P, A), (A,)
    """

    def __init__(self, config: EnvConfig) -> None:
        r = resolve(config)
        self.resolved = r
        self.grid, self.actions = r.grid, r.actions
        self.n_steps, self.n_alloc, self.n_actions = r.n_steps, r.grid.n, r.actions.action_dim
        self.weights = r.weights
        self.initial = r.initial
        self.chunk = r.total_samples / r.n_steps
        self.time_budget = r.sla.time_max / r.n_steps
        self.cost_budget = r.sla.cost_max / r.n_steps
        self.phases = r.phases
        self.step_phase = phase_sequence(r.phases, r.n_steps).astype(np.int64)
        slots = {pid: i for i, pid in enumerate(sorted({p.phase_id for p in r.phases}))}
        self.phase_slot = np.array([slots[p.phase_id] for p in r.phases], dtype=np.int64)
        self.next_index = r.actions.next_index_table()
        self._build_tables()

    def _build_tables(self) -> None:
        r = self.resolved
        v = r.grid.values()
        cpu_s = np.array([p.cpu_scale for p in r.phases])[:, None]
        mem_s = np.array([p.mem_scale for p in r.phases])[:, None]
        base = r.workload.params.parallel_fraction
        par = np.array([base if p.parallel is None else p.parallel for p in r.phases])[:, None]
        pred = r.workload.predict(
            v["gpus"], v["cpus"], v["memory_gb"], v["batch_size"], cpu_s, mem_s, par
        )
        self.pred = pred
        self.oom = pred["oom"]
        self.goodput = pred["goodput"]
        prices = r.resources
        self.hourly_cost = (
            v["gpus"] * prices.cost_per_gpu_hour
            + v["cpus"] * prices.cost_per_cpu_hour
            + v["memory_gb"] * prices.cost_per_gb_hour
        )
        ok_thr = pred["throughput"][~self.oom]
        scale = float(ok_thr.max()) if ok_thr.size else float(pred["throughput"].max())
        self.state = CloudEnvironmentState(
            r.resources,
            r.sla,
            grid=r.grid,
            n_steps=r.n_steps,
            max_phases=r.max_phases,
            throughput_scale=scale,
        )
        changed = np.array([0.0, 1.0])
        step_time = self.chunk / self.goodput[..., None] + r.restart_s * changed
        self.step_time = step_time
        self.step_cost = self.hourly_cost[None, :, None] * step_time / 3600.0
        self._fill_rewards(pred, v, changed)

    def metrics(
        self, p: Any, a: Any, changed: Any, step_time: Any, step_cost: Any, throughput: Any
    ) -> dict[str, Any]:
        """Metrics of running phase index ``p`` at allocation ``a`` (arrays broadcast)."""
        v = {k: x[a] for k, x in self.grid.values().items()}
        pr = {k: self.pred[k][p, a] for k in ("gpu_util", "cpu_util", "mem_util", "mem_gb")}
        return {
            **v,
            **pr,
            "throughput": throughput,
            "progress": 0.0,
            "elapsed_s": 0.0,
            "cost": 0.0,
            "phase": -1,
            "step_time_s": step_time,
            "step_cost": step_cost,
            "changed": changed,
        }

    def util_score(self, p: Any, a: Any) -> np.ndarray:
        """Mean utilisation of the allocated resources (GPU counted only when allocated)."""
        has_gpu = self.grid.values()["gpus"][a] > 0
        return (
            self.pred["gpu_util"][p, a] * has_gpu
            + self.pred["cpu_util"][p, a]
            + self.pred["mem_util"][p, a]
        ) / (2.0 + has_gpu)

    def scalarize(self, vector: Any, changed: Any) -> np.ndarray:
        """Scalar reward from reward vectors ``(..., 4)``: preference x (cost, time, efficiency)
        + ``sla_weight`` x sla - ``change_penalty`` x changed."""
        cfg = self.resolved.config
        vector = np.asarray(vector)
        return (
            vector[..., :3] @ self.weights
            + cfg.sla_weight * vector[..., 3]
            - cfg.change_penalty * np.asarray(changed, float)
        )

    def _fill_rewards(
        self, pred: dict[str, np.ndarray], v: dict[str, np.ndarray], changed: np.ndarray
    ) -> None:
        n_p, n_a = self.oom.shape
        p = np.arange(n_p)[:, None, None]
        a = np.arange(n_a)[None, :, None]
        ch = changed[None, None, :]
        m = self.metrics(p, a, ch, self.step_time, self.step_cost, pred["throughput"][p, a])
        status = self.state.sla_arrays(m)
        self.sla_status = status
        self.reward_vector = reward_components(
            self.step_time,
            self.step_cost,
            self.util_score(p, a),
            self.state.compliance_rate(status),
            self.time_budget,
            self.cost_budget,
        )
        self.reward_vector32 = self.reward_vector.astype(np.float32)
        self.reward = self.scalarize(self.reward_vector, ch)
        self.obs = self.state.vectorize(m)

    def oom_outcome(self, k: int, changed: Any) -> tuple[np.ndarray, np.ndarray]:
        """Reward vector and scalar reward of running out of memory at step ``k``."""
        cfg = self.resolved.config
        pen = -cfg.oom_penalty * (self.n_steps - np.asarray(k, float))
        vec = np.stack(np.broadcast_arrays(0.0 * pen, 0.0 * pen, 0.0 * pen, pen), axis=-1)
        return vec, cfg.sla_weight * pen - cfg.change_penalty * np.asarray(changed, float)

    def transition(self, k: int, a: int, u: int) -> tuple[int, float, bool]:
        """Noise-free ``(next allocation, reward, terminated)`` of action ``u`` at step ``k``."""
        a2 = int(self.next_index[a, u])
        ch = int(a2 != a)
        p = int(self.step_phase[k])
        if self.oom[p, a2]:
            return a2, float(self.oom_outcome(k, ch)[1]), True
        return a2, float(self.reward[p, a2, ch]), k + 1 >= self.n_steps

    def reward_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.resolved.config
        low = np.array([-1.0, -1.0, 0.0, -max(1.0, cfg.oom_penalty * self.n_steps)])
        return low, np.array([1.0, 1.0, 1.0, 0.0])


_CACHE: dict[str, EnvModel] = {}


def _key(config: EnvConfig) -> str:
    def default(o: Any) -> Any:
        if isinstance(o, np.ndarray):
            return o.tolist()
        if dataclasses.is_dataclass(o):
            return dataclasses.asdict(o)
        return repr(o)

    return json.dumps(dataclasses.asdict(config), default=default, sort_keys=True)


def build_env_model(config: EnvConfig) -> EnvModel:
    """The :class:`EnvModel` of ``config`` (cached: vector envs and the oracle share tables)."""
    key = _key(config)
    model = _CACHE.get(key)
    if model is None:
        if len(_CACHE) >= 32:
            _CACHE.pop(next(iter(_CACHE)))
        model = _CACHE[key] = EnvModel(config)
    return model

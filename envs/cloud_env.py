"""``CloudEnvironment``: a Gymnasium environment over a workload model (the design's MDP).

The dynamics live in :class:`envs.model.EnvModel` tables (one source of truth with
:mod:`envs.oracle`); ``step()`` is a few table lookups, so one environment runs well above
50k steps/s on one core when noise is off.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.model import REWARD_NAMES, EnvConfig, EnvModel, build_env_model
from envs.state import FRACTION_HIGH, SLA_NAMES, CloudEnvironmentState
from optimizer.foundation.allocation import Allocation

logger = logging.getLogger(__name__)


def valid_moves(model: Any, phases: np.ndarray, allocs: np.ndarray) -> np.ndarray:
    """``(n, n_actions)`` bool: the actions from allocation ``allocs[i]`` that fit in memory in
    phase ``phases[i]`` (:meth:`CloudEnvironment.action_masks`); a row with none is all True."""
    ok = ~model.oom[phases[:, None], model.next_index[allocs]]
    ok[~ok.any(axis=1)] = True
    return ok


class CloudEnvironment(gym.Env):
    """Choose the resources of a deep-learning training job while it runs.

    ## Description
    One episode is one training job whose work (``total_samples`` at the workload's reference
    batch) is split into ``n_steps`` equal chunks; one step is one adjustment interval: the agent
    sets the allocation (GPUs, CPU threads, memory, batch size) and the chunk runs with it. How
    long it takes and what it costs follow from the workload model (Pollux-form throughput,
    gradient-noise-scale statistical efficiency, Amdahl CPU scaling, linear memory) in the
    phase the job is in. Changing the allocation costs a restart (``restart_s``).

    ## Action Space
    ``Discrete(81)``: GPUs, CPUs, memory each down/keep/up one grid level, times batch size
    halve/keep/double; ``index = ((d_gpu*3 + d_cpu)*3 + d_mem)*3 + d_batch`` with ``d = delta + 1``.
    ``batch_actions=False`` gives the design's ``Discrete(27)`` (no batch term). Index 40 (13)
    keeps everything. Moves past a bound keep the resource where it is.

    ## Observation Space
    ``Box(0, high, (11 + max_phases + 7,), float32)``; with ``max_phases = 4`` (the default
    unless the phase sequence has more distinct phases; 22 entries):

    | Index | Observation                                   | Range   | Unit              |
    |-------|-----------------------------------------------|---------|-------------------|
    | 0-2   | GPUs, CPUs, memory / their largest level      | [0, 1]  | fraction          |
    | 3     | batch size position: log2(B/Bmin)/log2(Bmax/Bmin) | [0, 1] | fraction       |
    | 4-6   | GPU, CPU, memory utilisation in last interval | [0, 1]  | fraction          |
    | 7     | throughput / best throughput on the grid      | [0, 4]  | fraction          |
    | 8     | progress: chunks done / n_steps               | [0, 1]  | fraction          |
    | 9     | elapsed time / SLA time_max                   | [0, 4]  | fraction          |
    | 10    | spent cost / SLA cost_max                     | [0, 4]  | fraction          |
    | 11-14 | one-hot phase of the next chunk               | {0, 1}  |                   |
    | 15-20 | last interval met the SLA: time, cost, throughput, memory, GPU util, CPU util | {0, 1} | |
    | 21    | share of the checked SLAs met (overall compliance) | [0, 1] | fraction      |

    ## Rewards
    A reward vector ``info["reward_vector"] = (cost, time, efficiency, sla)`` per step
    (``reward_space`` follows MO-Gymnasium):

    * cost ``= clip(1 - step_cost / (cost_max / n_steps), -1, 1)``;
    * time ``= clip(1 - step_time / (time_max / n_steps), -1, 1)`` (progress per unit time);
    * efficiency ``=`` mean utilisation of the allocated GPU, CPU and memory, in [0, 1];
    * sla ``= -`` share of the checked SLAs the interval violated, in [-1, 0]; on out of
      memory it is ``-oom_penalty * (steps left, this one included)`` and the episode ends.

    The scalar reward is ``w_cost*cost + w_time*time + w_resource*efficiency + sla_weight*sla
    - change_penalty*[allocation changed]`` with ``w`` the preference vector. Summed over a job
    within budget, cost and time are ``n_steps * (1 - total / limit)``, so a sensible policy's
    return is positive and comparable with the oracle's optimum.

    ## Starting State
    The preset's (or ``initial``) allocation, progress 0, nothing spent; the utilisation and
    throughput entries show the model's prediction for that allocation in the first phase.
    ``reset(options={"allocation": a})`` starts the job at another allocation instead
    (``start_candidates()`` lists those whose first chunk fits in memory); the training loops
    use it for exploring starts.

    ## Episode End
    Termination: all ``n_steps`` chunks done, or out of memory (footprint of the batch in the
    phase above the allocated host memory, or the per-GPU batch above GPU memory). Truncation:
    none; an episode has at most ``n_steps`` steps. Passing the job's time or cost limit does not
    end it: it is recorded (``info["time_limit_violated"]``, ``info["cost_limit_violated"]``).

    ## Action Masks
    ``action_masks()`` (sb3-contrib's convention) marks the moves whose allocation fits in
    memory in the phase of the next chunk; REINFORCE chooses among them. Where none fits, all
    are marked valid.

    ## Info
    ``reward_vector`` (float32, 4), ``allocation`` ``(gpus, cpus, memory_gb, batch_size)`` the
    chunk ran with, ``phase`` (id), ``step_time_s``, ``step_cost``, ``elapsed_s``, ``cost``
    (cumulative), ``changed``, ``oom``, ``time_limit_violated``, ``cost_limit_violated``.

    ## Arguments
    ``CloudEnvironment(config=EnvConfig(...), render_mode=None, **overrides)``; ``overrides`` are
    :class:`envs.EnvConfig` fields, so ``gymnasium.make("cloudopt/CloudEnv-v0",
    workload="vgg16-v100", preference="cost")`` works. Workload presets: ``envs.list_presets()``
    (``configs/workloads/*.toml``). The exact model is ``env.model``
    (:class:`envs.model.EnvModel`); :func:`envs.oracle.optimal_policy` solves it.

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self, config: EnvConfig | None = None, render_mode: str | None = None, **overrides: Any
    ) -> None:
        config = (
            (config or EnvConfig()).replace(**overrides) if overrides else (config or EnvConfig())
        )
        self.config = config
        self.model: EnvModel = build_env_model(config)
        m = self.model
        self.resolved = m.resolved
        self.actions = m.actions
        self.state = CloudEnvironmentState(
            self.resolved.resources,
            self.resolved.sla,
            grid=m.grid,
            n_steps=m.n_steps,
            max_phases=self.resolved.max_phases,
            throughput_scale=m.state.throughput_scale,
        )
        self.state_dim, self.action_dim = self.state.state_dim, self.actions.action_dim
        self.observation_space = spaces.Box(0.0, self.state.high, dtype=np.float32)
        self.action_space = spaces.Discrete(self.action_dim)
        low, high = m.reward_bounds()
        self.reward_space = spaces.Box(
            low.astype(np.float32), high.astype(np.float32), dtype=np.float32
        )
        self.reward_dim = len(REWARD_NAMES)
        self.render_mode = render_mode
        self.user_preference = config.preference
        self.epoch_adjustment_frequency = 1
        """Chunks between adjustments (one chunk is one adjustment interval)."""
        self.metrics_history: list[dict[str, Any]] = []
        self.adjustment_log: list[dict[str, Any]] = []
        idx = self.state.index
        self._i_prog, self._i_time, self._i_cost = (
            idx["progress"],
            idx["time_used"],
            idx["cost_used"],
        )
        self._i_phase = idx["phase_0"]
        self._allocs = [
            tuple(x.item() for x in t) for t in zip(*m.grid.values().values(), strict=False)
        ]
        self._phase_ids = [p.phase_id for p in m.phases]
        self._i_thr, self._i_sla = idx["throughput"], idx["sla_time"]
        # Python-list views of the tables: indexing them is several times faster than numpy
        # scalar indexing, and step() is nothing but lookups.
        self._next = m.next_index.tolist()
        self._phase_of_step = m.step_phase.tolist()
        self._slot = m.phase_slot.tolist()
        self._oom = m.oom.tolist()
        self._rtc = np.stack([m.reward, m.step_time, m.step_cost], axis=-1).tolist()
        self._goodput = m.goodput.tolist()
        self._thr = m.pred["throughput"].tolist()
        self._hourly = m.hourly_cost.tolist()
        self._status = m.sla_status.tolist()
        self._checked = m.state.checked.tolist()
        self._weights = m.weights.tolist()
        self._noise = float(config.noise)
        self._noise_block: list[float] = []
        self._noise_pos = 0
        self._util = m.reward_vector[..., 0, 2].tolist()
        self._thr_min = self.resolved.sla.throughput_min
        self._sla_w, self._change_pen = config.sla_weight, config.change_penalty
        oom = [m.oom_outcome(k, np.array([0, 1])) for k in range(m.n_steps)]
        self._oom_vec = [v.astype(np.float32) for v, _ in oom]
        self._oom_reward = [r.tolist() for _, r in oom]
        self._time_max = self.resolved.sla.time_max
        self._cost_max = self.resolved.sla.cost_max
        self._reset_counters()

    # ------------------------------------------------------------------ gym API
    def _reset_counters(self) -> None:
        self._noise_block, self._noise_pos = [], 0
        self._k = 0
        self._a = self.model.initial
        self._elapsed = 0.0
        self._spent = 0.0
        self._last_vec = np.zeros(self.reward_dim, dtype=np.float32)
        self._last_changed = 0
        self.episode_reward = 0.0
        self.episode_steps = 0
        self.episode_start_time = 0.0
        self.time_limit_violated = False
        self.cost_limit_violated = False

    @property
    def epoch_counter(self) -> int:
        """Chunks done in this episode."""
        return self._k

    @property
    def current_allocation(self) -> Allocation:
        return self.model.grid.allocation(self._a)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a job; ``options={"allocation": a}`` starts it at ``a`` instead of the initial one.

        ``a`` is a grid index, an :class:`Allocation` or a ``(gpus, cpus, memory_gb,
        batch_size)`` tuple (snapped to the grid). Training loops use it for exploring starts.
        """
        start = None
        if options and options.get("allocation") is not None:
            start = self._start_index(options["allocation"])  # a bad option changes nothing
        super().reset(seed=seed)
        self._reset_counters()
        self.metrics_history = []
        m = self.model
        if start is not None:
            self._a = start
        p0 = int(m.step_phase[0])
        obs = m.obs[p0, self._a, 0].copy()
        obs[self._i_phase + m.phase_slot[p0]] = 1.0
        self.state.set_vector(obs)
        return obs.copy(), {"allocation": self._allocs[self._a], "phase": self._phase_ids[p0]}

    def _start_index(self, alloc: Any) -> int:
        m = self.model
        if isinstance(alloc, (int, np.integer)):
            if not 0 <= int(alloc) < m.n_alloc:
                raise ValueError(
                    f"reset option 'allocation' index {alloc} is outside the grid (0..{m.n_alloc - 1})"
                )
            return int(alloc)
        if isinstance(alloc, (tuple, list)):
            if len(alloc) != 4:
                raise ValueError(
                    "reset option 'allocation' tuple must be (gpus, cpus, memory_gb, batch_size), "
                    f"got {alloc!r}"
                )
            alloc = Allocation(*alloc)
        if not isinstance(alloc, Allocation):
            raise ValueError(
                f"reset option 'allocation' must be a grid index, an Allocation or a tuple, got {alloc!r}"
            )
        return m.grid.index_of(alloc)

    def action_masks(self) -> np.ndarray:
        """Which actions are valid now, ``(n_actions,)`` bool (sb3-contrib's convention).

        An action is invalid when the allocation it moves to runs out of memory in the phase
        of the next chunk (the phase the observation shows): that ends the job, so a planner
        that knows the phase never needs to try it. Where every move runs out of memory, or the
        episode is over, all actions are valid (the step then decides)."""
        m = self.model
        if self._k >= m.n_steps:
            return np.ones(self.action_space.n, dtype=bool)
        return valid_moves(m, np.array([self._phase_of_step[self._k]]), np.array([self._a]))[0]

    def start_candidates(self) -> np.ndarray:
        """Grid indices a job can start at without running out of memory in its first chunk."""
        m = self.model
        return np.flatnonzero(~m.oom[int(m.step_phase[0])])

    def step(self, action: int):
        m = self.model
        k, a = self._k, self._a
        if k >= m.n_steps:
            raise RuntimeError("step() called after the episode ended; call reset()")
        a2 = self._next[a][int(action)]
        ch = 1 if a2 != a else 0
        p = self._phase_of_step[k]
        if self._oom[p][a2]:
            return self._oom_step(k, a2, ch, p)
        if self._noise > 0:
            obs, vec, reward, t, c = self._outcome(p, a2, ch, self._noise_factor())
        else:
            obs = m.obs[p, a2, ch].copy()
            vec = m.reward_vector32[p, a2, ch].copy()
            reward, t, c = self._rtc[p][a2][ch]
        self._advance(a2, ch, t, c, vec, reward)
        k1 = self._k
        nxt = self._phase_of_step[k1] if k1 < m.n_steps else p
        obs[self._i_prog] = k1 / m.n_steps
        obs[self._i_time] = min(self._elapsed / self._time_max, FRACTION_HIGH)
        obs[self._i_cost] = min(self._spent / self._cost_max, FRACTION_HIGH)
        obs[self._i_phase + self._slot[nxt]] = 1.0
        self.state.set_vector(obs)
        info = self._info(a2, p, t, c, vec, ch, oom=False)
        if self.log_adjustments:
            self.log_adjustment_details(action, a, a2, reward, info)
        return obs.copy(), reward, k1 >= m.n_steps, False, info

    log_adjustments = False
    """Set True to keep :meth:`log_adjustment_details` records of every step (slower)."""

    def _advance(
        self, a2: int, ch: int, t: float, c: float, vec: np.ndarray, reward: float
    ) -> None:
        self._k += 1
        self._a = a2
        self._elapsed += t
        self._spent += c
        self._last_vec = vec
        self._last_changed = ch
        self.episode_reward += reward
        self.episode_steps += 1
        sla = self.resolved.sla
        self.time_limit_violated = self._elapsed > sla.time_max
        self.cost_limit_violated = self._spent > sla.cost_max

    def _info(
        self, a2: int, p: int, t: float, c: float, vec: np.ndarray, ch: int, oom: bool
    ) -> dict[str, Any]:
        return {
            "reward_vector": vec,
            "allocation": self._allocs[a2],
            "phase": self._phase_ids[p],
            "step_time_s": t,
            "step_cost": c,
            "elapsed_s": self._elapsed,
            "cost": self._spent,
            "changed": bool(ch),
            "oom": oom,
            "time_limit_violated": self.time_limit_violated,
            "cost_limit_violated": self.cost_limit_violated,
        }

    def _oom_step(self, k: int, a2: int, ch: int, p: int):
        m = self.model
        vec, reward = self._oom_vec[k].copy(), self._oom_reward[k][ch]
        t = self.resolved.restart_s
        c = self._hourly[a2] * t / 3600.0
        self._advance(a2, ch, t, c, vec, reward)
        self._k = m.n_steps  # the job is over
        obs = m.obs[p, a2, ch].copy()
        obs[self._i_sla + 3] = 0.0  # memory
        obs[self._i_sla + len(SLA_NAMES)] = 0.0  # overall
        obs[self._i_prog] = k / m.n_steps
        obs[self._i_time] = min(self._elapsed / self._time_max, FRACTION_HIGH)
        obs[self._i_cost] = min(self._spent / self._cost_max, FRACTION_HIGH)
        obs[self._i_phase + self._slot[p]] = 1.0
        self.state.set_vector(obs)
        return obs.copy(), reward, True, False, self._info(a2, p, t, c, vec, ch, True)

    def _outcome(self, p: int, a2: int, ch: int, eps: float):
        """Outcome when throughput is ``eps`` times the model's (log-normal noise).

        Only the throughput-dependent parts move: step time and cost, the throughput entry, the
        time/cost/throughput SLA checks and the reward terms built from them, in the formulas of
        :func:`envs.model.reward_components` written for Python scalars. With ``eps = 1`` it
        reproduces the tables exactly (tests/test_env_cloud.py checks this).
        """
        m = self.model
        t = m.chunk / (self._goodput[p][a2] * eps) + ch * self.resolved.restart_s
        c = self._hourly[a2] * t / 3600.0
        thr = self._thr[p][a2] * eps
        status = self._status[p][a2][ch][:]
        status[0] = t <= m.time_budget + 1e-9
        status[1] = c <= m.cost_budget + 1e-12
        status[2] = thr >= self._thr_min
        checked = [ok for ok, on in zip(status, self._checked, strict=True) if on]
        rate = sum(checked) / len(checked)
        r_cost = min(1.0, max(-1.0, 1.0 - c / m.cost_budget))
        r_time = min(1.0, max(-1.0, 1.0 - t / m.time_budget))
        util = self._util[p][a2]
        w = self._weights
        reward = (
            w[0] * r_cost
            + w[1] * r_time
            + w[2] * util
            + self._sla_w * (rate - 1.0)
            - self._change_pen * ch
        )
        obs = m.obs[p, a2, ch].copy()
        obs[self._i_thr] = min(thr / self.state.throughput_scale, FRACTION_HIGH)
        i = self._i_sla
        obs[i], obs[i + 1], obs[i + 2] = status[0], status[1], status[2]
        obs[i + len(SLA_NAMES)] = rate
        vec = np.array((r_cost, r_time, util, rate - 1.0), dtype=np.float32)
        return obs, vec, reward, t, c

    def _noise_factor(self) -> float:
        """Next mean-one log-normal throughput factor; normals are drawn from ``np_random``
        in blocks (one call per 256 steps) and the block is dropped at every reset."""
        if self._noise_pos >= len(self._noise_block):
            z = self.np_random.standard_normal(256)
            self._noise_block = np.exp(self._noise * z - 0.5 * self._noise**2).tolist()
            self._noise_pos = 0
        self._noise_pos += 1
        return self._noise_block[self._noise_pos - 1]

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        g, c, mem, b = self._allocs[self._a]
        return (
            f"step {self._k}/{self.model.n_steps} alloc g{g} c{c} m{mem:g} b{b} "
            f"elapsed {self._elapsed:.0f}s cost ${self._spent:.2f} "
            f"return {self.episode_reward:.3f}"
        )

    # ------------------------------------------------------------------ design methods
    def update_metrics(self, metrics: dict[str, Any]) -> np.ndarray:
        """Feed measured metrics (e.g. from a real run) into the state; returns the observation.

        ``metrics`` uses the keys of :meth:`envs.state.CloudEnvironmentState.vectorize`.
        """
        self.metrics_history.append(dict(metrics))
        return self.state.update_from_metrics(metrics)

    def _calculate_reward(
        self, components: np.ndarray | None = None, changed: bool | None = None
    ) -> float:
        """Scalar reward of a reward vector (default: the last step's)."""
        vec = self._last_vec if components is None else components
        ch = self._last_changed if changed is None else changed
        return float(self.model.scalarize(vec, ch))

    def _check_done(self) -> bool:
        """True once the job is finished (all chunks run) or ended by out of memory."""
        return self._k >= self.model.n_steps

    def _get_reward_components(self) -> dict[str, float]:
        """The last step's reward vector by name (cost, time, efficiency, sla)."""
        return {n: float(v) for n, v in zip(REWARD_NAMES, self._last_vec, strict=False)}

    def estimate_optimal_resources(self, priority: str = "balanced") -> dict[str, Any]:
        """Best fixed allocation for a priority (a preference name), from the exact model.

        Returns the allocation with its predicted job time (s), cost ($) and episode return.
        """
        from envs.oracle import best_static

        result = best_static(self.config, priority)
        return {
            "priority": priority,
            "allocation": result.allocation,
            "time_s": result.total_time_s,
            "cost": result.total_cost,
            "return": result.total_return,
        }

    def log_adjustment_details(
        self, action: int, old_index: int, new_index: int, reward: float, info: dict[str, Any]
    ) -> dict[str, Any]:
        """Record (and log at DEBUG) one adjustment: action, resource changes, reward, SLA."""
        old, new = self._allocs[old_index], self._allocs[new_index]
        entry = {
            "step": self._k,
            "action": int(action),
            "description": self.actions.get_action_description(int(action)),
            "old": old,
            "new": new,
            "reward": float(reward),
            "reward_vector": dict(
                zip(REWARD_NAMES, np.asarray(info["reward_vector"]).tolist(), strict=False)
            ),
            "sla_status": self.state.get_sla_status(),
            "sla_compliance": self.state.get_overall_sla_compliance(),
        }
        self.adjustment_log.append(entry)
        logger.debug("adjustment %s", entry)
        return entry


__all__ = ["CloudEnvironment", "EnvConfig", "SLA_NAMES"]

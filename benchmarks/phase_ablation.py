"""Does the phase in ``CloudEnvironment``'s state change a decision? (issue 21)

The observation carries a one-hot of the next chunk's phase (``phase_0 .. phase_{max-1}``,
envs/state.py). This ablation trains the registered agents (agents/registry) with their configs'
defaults, on the same episode budget and the same seeds, in four arms:

* ``phase``: the environment as it is;
* ``masked``: the same environment behind :class:`PhaseMask`, a Gymnasium
  ``ObservationWrapper`` that zeroes the phase one-hot and nothing else;
* ``clockless``: the phase one-hot shown, the clock hidden (``progress``, ``time_used``,
  ``cost_used``: on a fixed schedule they tell the phase too);
* ``blind``: both hidden. Only ``clockless`` against ``blind`` says what the one-hot itself
  carries; ``phase`` against ``masked`` can show nothing where the clock already tells it.

Hiding the phase also hides the environment's action masks (``CloudEnvironment.action_masks``:
the moves that fit in memory in the coming phase), which would tell it; REINFORCE acts among
the valid actions where it has them. So the arms compare what the agents do with the phase
(shown and used to rule out moves that run out of memory) against without it.

The workload is ``autoencoder-stream-cpu`` (configs/workloads/), whose CPU and memory needs
change by phase: load (one core, a third of the memory) -> train -> done, fitted from the
stage-labelled samples of execution d013 of ../shared/data/dl-traces (``--derive`` prints the
fit). The control is ``mlp-cpu``, a preset with one phase, where the one-hot is constant and
masking it cannot matter.

Reported per agent x arm, mean ± std over the seeds: the share of the DP optimum (mean
held-out return / the optimal plan's mean return on the same held-out episodes, throughput noise
on, as in benchmarks/agents_quality.py), the held-out return, and the greedy plan on the
noise-free job: how many of its allocation changes fall on a phase boundary (the step whose
chunk is the first of a new phase) and elsewhere, and on how many steps it runs the DP optimum's
allocation. Training is budgeted in episodes, not seconds, so figures do not depend on the
machine's load.

    python benchmarks/phase_ablation.py [--quick] [--episodes N] [--seeds 0,1,2]
        [--arms phase,masked,clockless,blind] [--preference resource] [--control mlp-cpu]
        [--json PATH] [--derive]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from agents.baselines import static_act  # noqa: E402
from agents.evaluate import ActFn, evaluate, heldout_seeds  # noqa: E402
from agents.registry import REGISTRY, Budget, TrainSetup, cloud_action_factors, get  # noqa: E402
from envs import CloudEnvironment, EnvConfig  # noqa: E402
from envs.masks import MASKED_FIELDS, FieldMask, PhaseMask  # noqa: E402,F401
from envs.oracle import optimal_policy, rollout  # noqa: E402
from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.foundation.atomic_files import atomic_write_json  # noqa: E402
from optimizer.foundation.config import MultiObjectiveConfig, RLConfig, SLAConfig  # noqa: E402
from optimizer.trials.phase_profile import profile_trace  # noqa: E402

PRESET = "autoencoder-stream-cpu"
CONTROL = "mlp-cpu"
AGENTS = tuple(REGISTRY)
ARMS = {"phase": (), "masked": ("phase",), "clockless": ("clock",), "blind": ("phase", "clock")}
"""Each arm and the observation groups it hides: the 2 x 2 of phase one-hot x clock."""
DATA = REPO.parent / "shared" / "data" / "dl-traces"
TRACE_EXEC = "d013"
"""The execution whose stages give the preset's phases (n=40000, 2 epochs, batch 32, 2 threads)."""
STAGE_IDS = {"load": 0, "train": 1, "done": 2}
FIT_WIDTH = 256
"""Throughput and memory are fitted on the autoencoder_stream executions of d013's model width."""
SLA_SLACK = 1.2
"""Time and cost limits: 20% above the whole job at d013's allocation (as mlp-cpu's preset)."""


def make_env_fn(config: EnvConfig, arm: str) -> Callable[[], gym.Env]:
    """Factory of the arm's environment (plain for ``phase``, wrapped in a mask otherwise)."""
    hidden = ARMS[arm]
    if hidden:
        return lambda: FieldMask(CloudEnvironment(config), hidden)
    return functools.partial(CloudEnvironment, config)


# --------------------------------------------------------------------------- the preset's fit
class StageLabels:
    """A stand-in phase detector that labels a trace with its scripts' own stages.

    :func:`optimizer.trials.phase_profile.profile_trace` then profiles the stages exactly as the main
    job profiles detected phases (short runs merged, CPU scales with time-weighted mean 1,
    memory scales relative to the largest phase mean).
    """

    delay = 0

    def __init__(self, labels: np.ndarray) -> None:
        self.labels = np.asarray(labels, dtype=np.int64)

    def predict(self, traces: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [self.labels]


def stage_profile(traces: pd.DataFrame, exec_id: str = TRACE_EXEC) -> pd.DataFrame:
    """Phases of one execution from its stage labels: ``phase, name, fraction, cpu_scale,
    mem_scale`` per phase in time order, plus the per-phase means behind them."""
    trace = traces[traces.exec_id == exec_id].sort_values("time_s")
    unknown = sorted(set(trace.stage) - set(STAGE_IDS))
    if trace.empty or unknown:
        raise ValueError(
            f"execution {exec_id!r}: no samples or stages {unknown} outside {STAGE_IDS}"
        )
    profile = profile_trace(trace, StageLabels(trace.stage.map(STAGE_IDS).to_numpy()))
    names = {v: k for k, v in STAGE_IDS.items()}
    stats = profile.stats.set_index("phase")
    rows = [
        {"phase": p, "name": names[p], "fraction": f, **stats.loc[p].to_dict()}
        for p, f in profile.sequence
    ]
    return pd.DataFrame(rows)


def fit_model(traces: pd.DataFrame, executions: pd.DataFrame) -> dict[str, Any]:
    """Throughput (alpha_c, beta_c, parallel fraction) and memory of autoencoder_stream.

    Throughput of each execution of width :data:`FIT_WIDTH` is ``n * epochs`` over its time in
    the ``train`` stage (samples every 0.5 s); the CPU form of :class:`envs.WorkloadModel` is
    fitted by least squares on log throughput. Memory is the train-stage peak of the
    executions with d013's dataset size, linear in the batch size.
    """
    from scipy.optimize import least_squares

    runs = executions[
        (executions.workload == "autoencoder_stream") & (executions.width == FIT_WIDTH)
    ]
    rows = []
    for exec_id, r in runs.set_index("exec_id").iterrows():
        train = traces[(traces.exec_id == exec_id) & (traces.stage == "train")]
        rows.append(
            {
                "exec_id": exec_id,
                "n": int(r.n),
                "batch": int(r.batch),
                "threads": int(r.threads),
                "throughput": r.n * r.epochs / (0.5 * len(train)),
                "mem_peak_gb": float(train.mem_gb.max()),
            }
        )
    table = pd.DataFrame(rows)

    def log_thr(x: np.ndarray) -> np.ndarray:
        b, c = table.batch.to_numpy(float), table.threads.to_numpy(float)
        return np.log(b / ((x[0] + x[1] * b) * ((1 - x[2]) + x[2] / c)))

    fit = least_squares(
        lambda x: log_thr(x) - np.log(table.throughput.to_numpy()),
        x0=[0.005, 1e-4, 0.5],
        bounds=([1e-6, 0.0, 0.0], [1.0, 1.0, 1.0]),
    )
    table["fitted"] = np.exp(log_thr(fit.x))
    n_job = int(executions.set_index("exec_id").loc[TRACE_EXEC, "n"])
    same = table[table.n == n_job]
    slope, base = np.polyfit(same.batch.to_numpy(float), same.mem_peak_gb.to_numpy(), 1)
    return {
        "alpha_c": float(fit.x[0]),
        "beta_c": float(fit.x[1]),
        "parallel_fraction": float(fit.x[2]),
        "mem_base_gb": float(base),
        "mem_per_sample_gb": float(slope),
        "table": table,
    }


def reference_sla(workload: str, reference: Allocation) -> SLAConfig:
    """:data:`SLA_SLACK` times the noise-free time and cost of the whole job at ``reference``."""
    loose = SLAConfig(time_max=1e9, cost_max=1e9, memory_max=1e9)
    model = CloudEnvironment(EnvConfig(workload=workload, sla=loose, initial=reference)).model
    run = rollout(model, [model.actions.noop] * model.n_steps)
    if run.oom:
        raise ValueError(f"the reference allocation {reference} runs out of memory")
    return SLAConfig(time_max=SLA_SLACK * run.total_time_s, cost_max=SLA_SLACK * run.total_cost)


def derive(data: Path = DATA) -> None:
    """Print the numbers of configs/workloads/autoencoder-stream-cpu.toml from the traces."""
    traces = pd.read_csv(data / "traces.csv")
    executions = pd.read_csv(data / "executions.csv")
    print(f"phases of {TRACE_EXEC} from its stage labels (optimizer.trials.phase_profile.profile_trace):")
    print(stage_profile(traces).round(4).to_string(index=False))
    for other in ("d023", "d053"):  # the same job with other epochs / batch: how fractions move
        prof = stage_profile(traces, other)
        print(
            f"  cross-check {other}: "
            + ", ".join(
                f"{r.name} {r.fraction:.3f} (cpu {r.cpu_scale:.2f}, mem {r.mem_scale:.2f})"
                for r in prof.itertuples()
            )
        )
    fit = fit_model(traces, executions)
    print(f"\nthroughput and memory of autoencoder_stream, width {FIT_WIDTH}:")
    print(fit.pop("table").round(4).to_string(index=False))
    print({k: round(v, 7) for k, v in fit.items()})
    job = executions.set_index("exec_id").loc[TRACE_EXEC]
    print(f"\njob of {TRACE_EXEC}: total_samples {job.n * job.epochs:g}, batch {job.batch}")
    if PRESET in _presets():
        ref = Allocation(gpus=0, cpus=int(job.threads), memory_gb=0.75, batch_size=int(job.batch))
        sla = reference_sla(PRESET, ref)
        print(
            f"SLA ({SLA_SLACK:g} x the job at {ref}): time_max {sla.time_max:.4g} s, "
            f"cost_max {sla.cost_max:.6g} $"
        )


def _presets() -> list[str]:
    from envs import list_presets

    return list_presets()


# --------------------------------------------------------------------------- plans
def greedy_plan(act: ActFn, env_fn: Callable[[], gym.Env]) -> tuple[list[tuple], list[int]]:
    """Allocation and phase id of every chunk of one noise-free episode of ``act``."""
    env = env_fn()
    obs, _ = env.reset(seed=0)
    allocations, phases = [], []
    done = False
    while not done:
        action = int(np.asarray(act(obs[None, :], [env])).reshape(-1)[0])
        obs, _, terminated, truncated, info = env.step(action)
        allocations.append(tuple(info["allocation"]))
        phases.append(int(info["phase"]))
        done = terminated or truncated
    return allocations, phases


def plan_changes(allocations: Sequence[tuple], phases: Sequence[int]) -> dict[str, int]:
    """Allocation changes between consecutive chunks, on phase boundaries and elsewhere."""
    on, off = 0, 0
    for k in range(1, len(allocations)):
        if allocations[k] != allocations[k - 1]:
            if phases[k] != phases[k - 1]:
                on += 1
            else:
                off += 1
    boundaries = sum(phases[k] != phases[k - 1] for k in range(1, len(phases)))
    return {"boundary_changes": on, "other_changes": off, "boundaries": boundaries}


def optimal_plan(config: EnvConfig) -> tuple[list[tuple], list[int], list[int]]:
    """The DP optimum's actions, allocation per chunk and phase id per chunk (noise-free)."""
    opt = optimal_policy(config)
    model = CloudEnvironment(config).model
    allocs = [(a.gpus, a.cpus, a.memory_gb, a.batch_size) for a in opt.allocations]
    phases = [model.phases[int(model.step_phase[k])].phase_id for k in range(len(allocs))]
    return opt.actions, allocs, phases


# --------------------------------------------------------------------------- the ablation
def train_agent(
    agent: str, env_fn: Callable[[], gym.Env], preference: str, seed: int, episodes: int
) -> tuple[ActFn, float]:
    """Train the registered ``agent`` with its config's defaults for ``episodes`` episodes;
    its greedy policy and seconds."""
    setup = TrainSetup(preference, RLConfig(seed=seed), MultiObjectiveConfig(),
                       cloud_action_factors(env_fn()))
    result = get(agent).train(env_fn, setup, Budget(episodes=episodes))
    return result.agent.act, result.train_seconds


def run_workload(workload: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    config = EnvConfig(workload=workload, preference=args.preference, noise=args.noise)
    quiet = config.replace(noise=0.0)
    seeds = heldout_seeds(args.eval_episodes)
    opt_actions, opt_allocs, opt_phases = optimal_plan(config)
    keep = CloudEnvironment(config).actions.noop
    r_opt = evaluate(static_act(opt_actions, keep), make_env_fn(config, "phase"), seeds).mean_return
    dp = plan_changes(opt_allocs, opt_phases)
    print(
        f"\n{workload} / {args.preference}: DP optimum held-out return {r_opt:.3f} "
        f"(noise-free {optimal_policy(config).total_return:.3f}); its plan changes the allocation "
        f"on {dp['boundary_changes']} of {dp['boundaries']} phase boundaries and "
        f"{dp['other_changes']} times elsewhere"
    )
    print("  DP plan: " + _plan_text(opt_allocs, opt_phases))
    rows = []
    for agent in AGENTS:
        for arm in args.arms:
            for seed in args.seeds:
                act, seconds = train_agent(
                    agent,
                    make_env_fn(config, arm),
                    args.preference,
                    seed,
                    args.episodes,
                )
                ev = evaluate(act, make_env_fn(config, arm), seeds)
                allocs, phases = greedy_plan(act, make_env_fn(quiet, arm))
                same = sum(a == b for a, b in zip(allocs, opt_allocs, strict=False))
                row = {
                    "workload": workload,
                    "preference": args.preference,
                    "agent": agent,
                    "arm": arm,
                    "seed": seed,
                    "share_of_optimum": ev.mean_return / r_opt,
                    "heldout_return": ev.mean_return,
                    "optimal_return": r_opt,
                    "oom_episodes": int(sum(bool(i.get("oom")) for i in ev.final_infos)),
                    **plan_changes(allocs, phases),
                    "steps_as_dp": same,
                    "steps": len(opt_allocs),
                    "train_seconds": seconds,
                    "plan": _plan_text(allocs, phases),
                }
                rows.append(row)
                print(
                    f"  {agent:<9} {arm:<9} seed {seed}: share {row['share_of_optimum']:8.2%}"
                    f"  return {ev.mean_return:8.3f}  boundary changes "
                    f"{row['boundary_changes']}/{row['boundaries']}  other changes "
                    f"{row['other_changes']}  steps as DP {same}/{len(opt_allocs)}"
                    f"  ({seconds:.0f} s)"
                )
                print("    plan: " + row["plan"])
    return rows


def _plan_text(allocs: Sequence[tuple], phases: Sequence[int]) -> str:
    """``phase:cCPUs mMEM bBATCH`` per chunk, a run of equal chunks written once with ``xN``."""
    parts: list[list[Any]] = []
    for a, p in zip(allocs, phases, strict=True):
        text = f"{p}:c{a[1]} m{a[2]:g} b{a[3]}"
        if parts and parts[-1][0] == text:
            parts[-1][1] += 1
        else:
            parts.append([text, 1])
    return " | ".join(t if n == 1 else f"{t} x{n}" for t, n in parts)


def summarise(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Mean ± std over seeds per workload x agent x arm."""
    df = pd.DataFrame(rows)
    out = []
    for (workload, agent, arm), g in df.groupby(["workload", "agent", "arm"], sort=False):
        out.append(
            {
                "workload": workload,
                "agent": agent,
                "arm": arm,
                "seeds": len(g),
                "share": f"{g.share_of_optimum.mean():.3f} ± {g.share_of_optimum.std(ddof=1):.3f}",
                "return": f"{g.heldout_return.mean():.3f} ± {g.heldout_return.std(ddof=1):.3f}",
                "opt_return": round(float(g.optimal_return.iloc[0]), 3),
                "boundary_changes": f"{g.boundary_changes.mean():.2f}/{int(g.boundaries.iloc[0])}",
                "other_changes": round(float(g.other_changes.mean()), 2),
                "steps_as_dp": f"{g.steps_as_dp.mean():.1f}/{int(g.steps.iloc[0])}",
                "oom_eps": round(float(g.oom_episodes.mean()), 2),
            }
        )
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, 3000 episodes, no control")
    parser.add_argument("--episodes", type=int, default=12_000, help="training episodes per run")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--preference", default="resource")
    parser.add_argument("--workload", default=PRESET)
    parser.add_argument("--control", default=CONTROL, help="a one-phase preset ('' for none)")
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma-separated arms of {', '.join(ARMS)}")
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--noise", type=float, default=0.05, help="throughput noise sigma")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", default=None, help="write the per-seed rows as JSON here")
    parser.add_argument("--derive", action="store_true", help="print the preset's fit and exit")
    args = parser.parse_args(argv)
    if args.derive:
        derive()
        return 0
    if args.quick:
        args.seeds, args.episodes, args.control = "0,1", 3000, ""
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
    torch.set_num_threads(args.threads)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    print(
        f"phase_ablation: {args.workload} (control {args.control or 'none'}), preference "
        f"{args.preference}, {args.episodes} training episodes per run, seeds {args.seeds}, "
        f"{args.eval_episodes} held-out episodes, noise {args.noise:g}, torch threads "
        f"{torch.get_num_threads()}, CPUs {len(os.sched_getaffinity(0))}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    start = time.perf_counter()
    rows = run_workload(args.workload, args)
    if args.control:
        rows += run_workload(args.control, args)
    print("\nmean ± std over seeds (share of the DP optimum on the same held-out episodes):")
    print(summarise(rows).to_string(index=False))
    print(f"\nwall time {time.perf_counter() - start:.0f} s")
    if args.json:
        atomic_write_json(args.json, {"args": {k: v for k, v in vars(args).items()}, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Raw speed of CloudEnvironment and of the exact oracle.

Prints, for one environment on one core: steps/s without noise and with throughput noise, a
``SyncVectorEnv`` of 8 copies (environment steps/s, all copies counted), and Gymnasium's
CartPole-v1 measured in the same run as the baseline (ratio = ours / CartPole); the training
loops' lockstep batches of 32 noisy episodes (mostly keeping the allocation), vectorised (``envs.lockstep.CloudLockstep``)
against the same copies stepped one by one (``GymLockstep``, the baseline). For the oracle:
the DP solve time on the default preset (tables built from scratch, then solved from cached
tables), against a plain Python-loop Bellman backup over the same tables (one stage timed,
times the number of stages).

Usage: ``python benchmarks/env_speed.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import envs
from envs import EnvConfig, oracle
from envs.lockstep import CloudLockstep, GymLockstep
from envs.model import EnvModel, build_env_model


def steps_per_s(env: gym.Env, n: int, seed: int = 0) -> float:
    actions = np.random.default_rng(seed).integers(0, env.action_space.n, n).tolist()
    env.reset(seed=seed)
    step, reset = env.step, env.reset
    t0 = time.perf_counter()
    for a in actions:
        if step(a)[2]:
            reset()
    return n / (time.perf_counter() - t0)


def vector_steps_per_s(n_envs: int, n: int, seed: int = 0) -> float:
    venv = gym.vector.SyncVectorEnv([lambda: gym.make(envs.ENV_ID) for _ in range(n_envs)])
    venv.reset(seed=seed)
    acts = np.random.default_rng(seed).integers(0, 81, (n, n_envs))
    t0 = time.perf_counter()
    for a in acts:
        venv.step(a)
    dt = time.perf_counter() - t0
    venv.close()
    return n * n_envs / dt


def lockstep_steps_per_s(batch: CloudLockstep | GymLockstep, batches: int) -> float:
    """Env steps/s of whole lockstep batches (resets included).

    Actions keep the allocation, except a random move with probability 0.1: a trained policy
    mostly keeps, and uniformly random moves end most episodes within a few steps (out of
    memory), which would time little else than resets.
    """
    rng = np.random.default_rng(0)
    steps = 0
    t0 = time.perf_counter()
    for b in range(batches):
        batch.reset(range(b * batch.n, (b + 1) * batch.n))
        alive = np.arange(batch.n)
        while len(alive):
            moves = rng.integers(0, 81, len(alive))
            over = batch.step(alive, np.where(rng.random(len(alive)) < 0.1, moves, 40))[3]
            steps += len(alive)
            alive = alive[~over]
    return steps / (time.perf_counter() - t0)


def python_loop_stage_s(model: EnvModel) -> float:
    """Seconds of one Bellman stage done with Python loops over the same tables."""
    value = np.zeros(model.n_alloc)
    p = int(model.step_phase[0])
    t0 = time.perf_counter()
    for a in range(model.n_alloc):
        best = -np.inf
        for u in range(model.n_actions):
            a2 = int(model.next_index[a, u])
            q = (
                model.oom_outcome(0, a2 != a)[1]
                if model.oom[p, a2]
                else model.reward[p, a2, int(a2 != a)] + value[a2]
            )
            best = max(best, float(q))
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else 200_000
    cart = steps_per_s(gym.make("CartPole-v1").unwrapped, n)
    raw = steps_per_s(envs.CloudEnvironment(), n)
    noisy = steps_per_s(envs.CloudEnvironment(noise=0.1), n // 4)
    made = steps_per_s(gym.make(envs.ENV_ID), n)
    vec = vector_steps_per_s(8, n // 40)
    noisy_cfg = EnvConfig(noise=0.05)
    batches = 20 if args.quick else 200
    one_by_one = lockstep_steps_per_s(
        GymLockstep([envs.CloudEnvironment(noisy_cfg) for _ in range(32)]), batches
    )
    vectorised = lockstep_steps_per_s(CloudLockstep(envs.CloudEnvironment(noisy_cfg), 32), batches)

    cfg = EnvConfig()
    t0 = time.perf_counter()
    model = EnvModel(cfg)
    build_s = time.perf_counter() - t0
    build_env_model(cfg)
    reps = 3 if args.quick else 10
    t0 = time.perf_counter()
    for _ in range(reps):
        oracle.solve(model)
    solve_s = (time.perf_counter() - t0) / reps
    loop_s = python_loop_stage_s(model) * model.n_steps
    res = {
        "cartpole_steps_per_s": cart,
        "env_steps_per_s": raw,
        "env_noise_steps_per_s": noisy,
        "env_make_steps_per_s": made,
        "sync_vector_8_steps_per_s": vec,
        "lockstep_32_one_by_one_steps_per_s": one_by_one,
        "lockstep_32_vectorised_steps_per_s": vectorised,
        "oracle_build_tables_s": build_s,
        "oracle_solve_s": solve_s,
        "python_loop_solve_s": loop_s,
        "n_alloc": model.n_alloc,
        "n_actions": model.n_actions,
        "n_steps": model.n_steps,
    }
    print(
        f"one env, raw (noise off)      {raw:>10,.0f} steps/s  ({raw / cart:.2f}x CartPole-v1 "
        f"{cart:,.0f} steps/s)"
    )
    print(f"one env, noise 0.1            {noisy:>10,.0f} steps/s  ({noisy / cart:.2f}x CartPole)")
    print(f"gymnasium.make (checkers)     {made:>10,.0f} steps/s  ({made / cart:.2f}x CartPole)")
    print(f"SyncVectorEnv x 8             {vec:>10,.0f} env steps/s ({vec / cart:.2f}x CartPole)")
    print(
        f"lockstep x 32, noise 0.05      {vectorised:>10,.0f} env steps/s vectorised, "
        f"{one_by_one:,.0f} one by one ({vectorised / one_by_one:.1f}x)"
    )
    print(
        f"oracle, default preset ({model.n_alloc} allocations x {model.n_actions} actions x "
        f"{model.n_steps} steps): tables {build_s * 1e3:.1f} ms, DP solve {solve_s * 1e3:.1f} ms "
        f"({loop_s / solve_s:.0f}x faster than a Python-loop backup, {loop_s:.2f} s)"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()

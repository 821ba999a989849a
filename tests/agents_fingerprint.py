"""Fingerprints of seeded, episode-bounded agent training: a refactor that changes nothing
leaves them as they were.

Each agent of the registry is trained through its public path (``spec.train(env_fn, setup,
Budget(episodes=N))``) on a small ``CloudEnvironment``; the fingerprint holds every network's
parameter sums (found by walking the trained agent, so it does not depend on attribute names),
a digest of their bytes, the greedy actions and their probabilities on fixed states, the last
row of the learning curve, and the plan ``recommend`` makes with a fixed number of episodes.
:func:`variants` fingerprints the loops' other settings (the replayed actor updates, n-step
transitions, epsilon-mixing without factored heads) the same way.

    python tests/agents_fingerprint.py --write PATH   # record
    python tests/agents_fingerprint.py --check PATH   # compare exactly with a record
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from envs import CloudEnvironment, stacked_masks  # noqa: E402
from envs.model import EnvConfig  # noqa: E402
from optimizer.foundation.config import load_config  # noqa: E402

TINY = EnvConfig(workload="mlp-cpu", preference="cost", n_steps=5)
"""A five-interval job: every agent trains on it in about a second."""
EPISODES = 128
"""Enough for REINFORCE's 8 updates and the multi-objective agent's batches past its first
256 steps (its updates start there)."""


def _modules(obj: Any, seen: set[int] | None = None) -> list[torch.nn.Module]:
    """Every ``nn.Module`` reachable from ``obj`` through the project's own objects, lists,
    tuples and dicts (not through a module found: its parameters are its own)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        return [obj]
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif type(obj).__module__.split(".")[0] == "agents" and hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    else:
        return []
    return [m for item in items for m in _modules(item, seen)]


def weights(agent: Any) -> dict[str, Any]:
    """Sums of every network's parameters (sorted, so their order does not matter) and a
    digest of their bytes."""
    sums, digests = [], []
    for module in _modules(agent):
        flat = [p.detach().cpu().double().reshape(-1) for p in module.parameters()]
        if not flat:
            continue
        values = torch.cat(flat)
        sums.append([float(values.sum()), float(values.abs().sum()), int(values.numel())])
        digests.append(hashlib.sha256(b"".join(
            p.detach().cpu().contiguous().numpy().tobytes() for p in module.parameters()
        )).hexdigest())
    return {"sums": sorted(sums), "digest": hashlib.sha256(
        "".join(sorted(digests)).encode()).hexdigest()}


def _states(env_fn: Any, n: int = 8) -> tuple[np.ndarray, list[Any]]:
    """``n`` first observations of held-out seeds, each with its environment."""
    envs, obs = [env_fn() for _ in range(n)], []
    for i, env in enumerate(envs):
        o, _ = env.reset(seed=2_000_000_000 + i)
        for step in range(i % 4):  # a few fixed valid moves, so the states differ
            valid = np.flatnonzero(stacked_masks([env])[0])
            o = env.step(int(valid[(3 * i + step) % len(valid)]))[0]
        obs.append(o)
    return np.stack(obs), envs


def answers(act: Any, probabilities: Any, env_fn: Any) -> dict[str, Any]:
    """Greedy actions and the probability of each on fixed states."""
    obs, envs = _states(env_fn)
    actions = np.asarray(act(obs, envs)).reshape(-1)
    probs = np.asarray(probabilities(obs, envs))
    return {"actions": [int(a) for a in actions],
            "probs": [float(p) for p in probs[np.arange(len(actions)), actions]],
            "probs_digest": hashlib.sha256(probs.astype(np.float64).tobytes()).hexdigest()}


def curve_tail(curve: Any) -> dict[str, float]:
    row = curve.iloc[-1].to_dict()
    return {k: float(v) for k, v in sorted(row.items()) if k != "wall_s"}


def _env_fn() -> Any:
    return CloudEnvironment(TINY.replace(noise=0.05))


def registry_fingerprints() -> dict[str, Any]:
    """Every registered agent trained for :data:`EPISODES` through the registry."""
    from agents.registry import Budget, TrainSetup, cloud_action_factors, registered

    config = load_config(None)
    setup = TrainSetup("cost", config.rl, config.multi_objective,
                       cloud_action_factors(_env_fn()))
    out = {}
    for spec in registered():
        result = spec.train(_env_fn, setup, Budget(episodes=EPISODES))
        out[spec.name] = {"episodes": result.episodes, "weights": weights(result.agent),
                          "answers": answers(result.agent.act,
                                             result.agent.action_probabilities, _env_fn),
                          "curve": curve_tail(result.curve)}
    return out


def plan_fingerprint() -> dict[str, Any]:
    """The recommendation a fixed number of episodes gives (the planning's own path)."""
    from optimizer.search.recommend import recommend

    r = recommend(TINY, load_config(None), time_budget_s=None, episodes=EPISODES)
    return {
        "agent": r.agent,
        "allocation": [r.allocation.gpus, r.allocation.cpus, r.allocation.memory_gb,
                       r.allocation.batch_size],
        "outcomes": {o.name: [o.total_return, o.share_of_optimum, o.episodes]
                     for o in r.outcomes},
        "plans": {name: [[row["action"], row["confidence"], row["uncertainty"]]
                         for row in rows] for name, rows in r.plans.items()},
    }


def variants() -> dict[str, Any]:
    """The loops' other settings, through each algorithm's own training function."""
    from agents.morl import MORLConfig
    from agents.morl import train as train_morl
    from agents.registry import cloud_action_factors
    from agents.reinforce import ReinforceConfig
    from agents.reinforce import train as train_reinforce

    factors = cloud_action_factors(_env_fn())
    out: dict[str, Any] = {}
    plain = train_reinforce(_env_fn, ReinforceConfig(
        seed=4, hidden_dim=32, gamma=0.99, lr_actor=3e-4, lr_critic=1e-3, entropy_coef=0.01,
        exploration_noise=0.1, episodes=64, n_envs=8, anneal_fraction=0.0, anneal_lr=False,
        exploring_starts=0.0))
    out["reinforce-plain"] = {"weights": weights(plain.agent),
                              "curve": curve_tail(plain.curve)}
    rl = dict(hidden_dim=32, actor_activation="relu", dropout_rate=0.1, lr_actor=3e-4,
              lr_critic=1e-3, gamma=0.99, tau=0.005, batch_size=32, entropy_coef=0.01,
              exploration_noise=0.1)
    loop = dict(critic_dropout=None, episodes=48, n_envs=4, updates_per_step=2,
                learning_starts=32, anneal_fraction=0.0, anneal_power=1.0, anneal_lr=False,
                exploring_starts=0.0, critic_fit_epochs=0)
    for name, seed, extra in (
        ("morl-projection-nstep", 5, dict(actor_update="projection", n_step=3)),
        ("morl-expected-q-auto-alpha", 6, dict(actor_update="expected_q",
                                               target_entropy=0.5, critic_combine="mean",
                                               anneal_fraction=0.5)),
        ("morl-advantage-gae", 7, dict(actor_update="advantage", gae_lambda=0.9,
                                       critic_fit_epochs=2, exploring_starts=0.3,
                                       anneal_fraction=0.8, anneal_power=2.0)),
    ):
        config = MORLConfig(seed=seed, **{**rl, **loop, **extra})
        result = train_morl(_env_fn, "time", config, action_factors=factors)
        out[name] = {"weights": weights(result.agent), "curve": curve_tail(result.curve),
                     "episodes": result.episodes}
    return out


def fingerprint() -> dict[str, Any]:
    torch.set_num_threads(1)
    return {"registry": registry_fingerprints(), "plan": plan_fingerprint(),
            "variants": variants()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path)
    group.add_argument("--check", type=Path)
    args = parser.parse_args(argv)
    now = json.loads(json.dumps(fingerprint()))  # the floats as JSON keeps them
    if args.write:
        args.write.write_text(json.dumps(now, indent=1) + "\n", encoding="utf-8")
        return 0
    recorded = json.loads(args.check.read_text(encoding="utf-8"))
    same = recorded == now
    for part in ("registry", "plan", "variants"):
        for key in sorted(set(recorded[part]) | set(now[part])):
            ok = recorded[part].get(key) == now[part].get(key)
            print(f"{part}/{key}: {'same' if ok else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

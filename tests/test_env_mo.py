"""The MO-Gymnasium variant returns the vector its reward_space declares; LinearReward over it
gives the scalar environment's reward (but for the change penalty)."""

import subprocess
import sys

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401 - registers the ids
from envs import ENV_ID, MO_ENV_ID

KW = {"workload": "resnet50-v100", "preference": "cost"}


def test_mo_env_passes_check_env_and_returns_the_declared_vector():
    env = gymnasium.make(MO_ENV_ID, **KW).unwrapped
    check_env(env, skip_render_check=True)
    env.reset(seed=0)
    _, vec, *_ , info = env.step(env.action_space.sample())
    assert vec.shape == env.reward_space.shape and vec.dtype == np.float32
    assert env.reward_space.contains(vec)
    assert np.array_equal(vec, info["reward_vector"])


def test_scalar_reward_is_the_weighted_vector_but_for_the_change_penalty():
    scalar = gymnasium.make(ENV_ID, **KW).unwrapped
    mo = gymnasium.make(MO_ENV_ID, **KW).unwrapped
    w = mo.linear_weights()
    penalty = scalar.resolved.config.change_penalty
    scalar.reset(seed=1)
    mo.reset(seed=1)
    rng = np.random.default_rng(0)
    done = False
    while not done:
        a = int(rng.integers(scalar.action_space.n))
        _, r, done, _, info = scalar.step(a)
        _, vec, done_mo, _, info_mo = mo.step(a)
        assert done == done_mo
        expected = float(vec @ w) - (penalty if info_mo["changed"] else 0.0)
        assert r == pytest.approx(expected, abs=1e-5) == pytest.approx(info_mo["scalar_reward"],
                                                                       abs=1e-5)


def test_mo_gymnasium_wrappers():
    mo_gym = pytest.importorskip("mo_gymnasium")
    from mo_gymnasium.wrappers import LinearReward, MORecordEpisodeStatistics

    env = MORecordEpisodeStatistics(gymnasium.make(MO_ENV_ID, **KW), gamma=1.0)
    weights = env.unwrapped.linear_weights()
    env = LinearReward(env, weight=weights)
    env.reset(seed=0)
    total, done, info = 0.0, False, {}
    while not done:
        _, r, terminated, truncated, info = env.step(0)  # keep: no change penalty
        total += r
        done = terminated or truncated
    episode = info["episode"]
    assert episode["r"].shape == (4,) and mo_gym is not None
    assert float(episode["r"] @ weights) == pytest.approx(total, rel=1e-4)


def test_registered_ids_after_import_gymnasium_alone(repo_root):
    code = ("import gymnasium; gymnasium.make('envs:cloudopt/CloudEnv-v0'); "
            "gymnasium.make('envs:cloudopt/CloudEnvMO-v0'); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=repo_root, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]

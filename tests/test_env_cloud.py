"""CloudEnvironment: Gymnasium contract, registration, vector env, determinism, rewards."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs import CloudEnvironment
from envs.state import SLA_NAMES


@pytest.mark.parametrize("workload", envs.list_presets())
def test_check_env_passes_on_every_preset(workload):
    check_env(CloudEnvironment(workload=workload), skip_render_check=True)
    check_env(
        CloudEnvironment(workload=workload, noise=0.1, batch_actions=False), skip_render_check=True
    )


def test_gymnasium_make_and_spaces():
    env = gym.make(envs.ENV_ID, workload="resnet50-v100", preference="cost")
    obs, info = env.reset(seed=0)
    assert env.observation_space.shape == (22,) and env.observation_space.dtype == np.float32
    assert env.action_space.n == 81
    assert env.observation_space.contains(obs)
    obs, r, term, trunc, info = env.step(40)
    assert info["reward_vector"].shape == (4,)
    assert env.unwrapped.reward_space.shape == (4,)
    assert env.unwrapped.reward_space.contains(info["reward_vector"])
    env.close()
    small = gym.make(envs.ENV_ID, batch_actions=False)
    assert small.action_space.n == 27


def test_sync_vector_env_of_eight():
    venv = gym.vector.SyncVectorEnv([lambda: gym.make(envs.ENV_ID) for _ in range(8)])
    obs, _ = venv.reset(seed=3)
    assert obs.shape == (8, 22)
    total = np.zeros(8)
    for _ in range(25):
        obs, r, term, trunc, info = venv.step(venv.action_space.sample())
        total += r
    assert obs.shape == (8, 22) and np.isfinite(total).all()
    venv.close()


def _episode(env, seed, actions):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, r, term, _, info = env.step(a)
        out.append(np.append(obs, [r, info["step_time_s"]]))
        if term:
            break
    return out


def test_seed_determinism_with_noise():
    env = CloudEnvironment(noise=0.2)
    acts = np.random.default_rng(0).integers(0, 81, 20).tolist()
    a, b = _episode(env, 7, acts), _episode(env, 7, acts)
    c = _episode(env, 8, acts)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=False))
    assert any(not np.array_equal(x, y) for x, y in zip(a[1:], c[1:], strict=False))


def test_episode_ends_after_n_steps_and_progress_is_exact():
    env = CloudEnvironment(n_steps=5)
    obs, _ = env.reset(seed=0)
    i = env.state.index["progress"]
    for k in range(5):
        obs, r, term, trunc, info = env.step(env.actions.noop)
        assert obs[i] == pytest.approx((k + 1) / 5)
        assert term == (k == 4) and not trunc
    assert env._check_done()
    with pytest.raises(RuntimeError):
        env.step(0)


def test_reward_is_preference_weighted_sum_of_components():
    env = CloudEnvironment(preference=[0.5, 0.3, 0.2], sla_weight=0.7, change_penalty=0.05)
    env.reset(seed=0)
    for a in (40, 67, 40, 13):
        _, r, _, _, info = env.step(a)
        v = info["reward_vector"]
        expect = 0.5 * v[0] + 0.3 * v[1] + 0.2 * v[2] + 0.7 * v[3] - 0.05 * info["changed"]
        assert r == pytest.approx(expect, abs=1e-5)
        assert env._calculate_reward() == pytest.approx(r, abs=1e-5)
        assert set(env._get_reward_components()) == {"cost", "time", "efficiency", "sla"}


def test_time_component_sums_to_budget_share():
    """Summed over a job without changes, the time component is n_steps * (1 - T / time_max)."""
    env = CloudEnvironment(workload="resnet50-v100", preference="time")
    env.reset(seed=0)
    times, total = 0.0, 0.0
    for _ in range(env.model.n_steps):
        _, _, term, _, info = env.step(env.actions.noop)
        times += info["step_time_s"]
        total += info["reward_vector"][1]
    sla = env.resolved.sla
    assert total == pytest.approx(env.model.n_steps * (1 - times / sla.time_max), rel=1e-5)
    assert info["time_limit_violated"] == (times > sla.time_max)


def test_out_of_memory_ends_episode_with_penalty():
    # batch 512 on one V100 exceeds the GPU memory: doubling twice from 128 runs out of memory
    env = CloudEnvironment(workload="resnet50-v100", oom_penalty=1.0, sla_weight=1.0)
    env.reset(seed=0)
    double = env.actions.noop + 1
    _, r1, term1, _, info1 = env.step(double)  # 256 on one GPU: out of GPU memory
    assert term1 and info1["oom"]
    assert info1["reward_vector"].shape == (4,) and info1["reward_vector"][3] == -env.model.n_steps
    assert r1 == pytest.approx(-env.model.n_steps - env.config.change_penalty)


def test_observation_fields_and_sla_helpers():
    env = CloudEnvironment()
    obs, _ = env.reset(seed=0)
    assert len(env.state.fields) == env.state_dim == obs.shape[0]
    status = env.state.get_sla_status()
    assert list(status) == list(SLA_NAMES)
    assert 0.0 <= env.state.get_overall_sla_compliance() <= 1.0
    phase = obs[env.state.index["phase_0"] : env.state.index["phase_0"] + 4]
    assert phase.sum() == 1.0


def test_update_metrics_from_measurements():
    env = CloudEnvironment()
    env.reset(seed=0)
    vec = env.update_metrics(
        {
            "gpus": 2,
            "cpus": 16,
            "memory_gb": 24,
            "batch_size": 256,
            "gpu_util": 0.9,
            "cpu_util": 0.5,
            "mem_util": 0.6,
            "throughput": 600.0,
            "progress": 0.5,
            "elapsed_s": 3600,
            "cost": 5.0,
            "phase": 1,
            "step_time_s": 10.0,
            "step_cost": 0.1,
            "mem_gb": 12.0,
        }
    )
    idx = env.state.index
    assert vec[idx["gpus"]] == pytest.approx(0.5)
    assert vec[idx["phase_1"]] == 1.0 and vec[idx["sla_time"]] == 1.0
    assert env.metrics_history[-1]["throughput"] == 600.0


def test_estimate_optimal_resources_and_log():
    env = CloudEnvironment()
    fast = env.estimate_optimal_resources("time")
    cheap = env.estimate_optimal_resources("cost")
    assert fast["time_s"] < cheap["time_s"]
    assert fast["allocation"].gpus >= cheap["allocation"].gpus
    env.log_adjustments = True
    env.reset(seed=0)
    env.step(67)
    entry = env.adjustment_log[-1]
    assert entry["description"].startswith("Increase GPUs by 1")
    assert entry["old"] != entry["new"]


def test_phase_prototype_from_detector():
    env = CloudEnvironment(
        phase_sequence=[(3, 0.5), (1, 0.5)], phase_scales={3: (2.0, 1.5)}, n_steps=4
    )
    assert [p.phase_id for p in env.model.phases] == [3, 1]
    assert env.model.step_phase.tolist() == [0, 0, 1, 1]
    assert env.model.phases[0].mem_scale == 1.5


def test_bad_config_is_reported():
    from optimizer.foundation.errors import CloudoptError

    with pytest.raises(CloudoptError, match="not found"):
        CloudEnvironment(workload="no-such-preset")
    with pytest.raises(CloudoptError, match="preference"):
        CloudEnvironment(preference="fastest")
    with pytest.raises(CloudoptError, match="unknown environment option 'workloads'"):
        CloudEnvironment(workloads="vgg16-v100")
    with pytest.raises(CloudoptError, match="max_phases"):
        CloudEnvironment(phase_sequence=[(i, 0.2) for i in range(5)], max_phases=4)


def test_noise_path_with_unit_noise_reproduces_the_tables():
    env = CloudEnvironment(workload="vgg16-p100", sla=None)
    m = env.model
    rng = np.random.default_rng(0)
    for _ in range(200):
        p, a, ch = rng.integers(len(m.phases)), rng.integers(m.n_alloc), rng.integers(2)
        obs, vec, reward, t, c = env._outcome(int(p), int(a), int(ch), 1.0)
        np.testing.assert_allclose(obs, m.obs[p, a, ch], atol=1e-6)
        np.testing.assert_allclose(vec, m.reward_vector[p, a, ch], atol=1e-6)
        assert reward == pytest.approx(m.reward[p, a, ch], abs=1e-9)
        assert (t, c) == pytest.approx((m.step_time[p, a, ch], m.step_cost[p, a, ch]))


def test_noise_path_with_every_sla_checked():
    from optimizer.foundation.config import SLAConfig

    sla = SLAConfig(
        time_max=30000,
        cost_max=40,
        throughput_min=500,
        memory_max=20,
        gpu_util_min=50,
        cpu_util_min=30,
    )
    env = CloudEnvironment(sla=sla)
    m = env.model
    assert m.state.checked.all()
    for p, a, ch in [(0, 5, 0), (1, 300, 1), (2, 700, 0), (1, 959, 1)]:
        obs, vec, reward, _, _ = env._outcome(p, a, ch, 1.0)
        np.testing.assert_allclose(obs, m.obs[p, a, ch], atol=1e-6)
        assert reward == pytest.approx(m.reward[p, a, ch], abs=1e-9)


def test_phases_from_detector_labels_and_stats():
    import pandas as pd

    from envs.workload import phases_from_labels

    labels = [-1, -1, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 4, 1, 1, 1, 3, 3, 3, 3]
    stats = pd.DataFrame(
        [
            (p, f, m)
            for p, c, mem in [
                (0, 2.0, 1.0),
                (1, 1.0, 1.0),
                (2, 1.0, 3.0),
                (3, 0.5, 1.0),
                (4, 4.0, 2.0),
            ]
            for f, m in (("cpu_cores", c), ("mem_gb", mem))
        ],
        columns=["phase", "feature", "mean"],
    )
    phases = phases_from_labels(labels, stats)
    assert [p.phase_id for p in phases] == [0, 2, 4, 1, 3]
    assert sum(p.fraction for p in phases) == pytest.approx(1.0)
    weights = np.array([p.fraction for p in phases])
    assert weights @ [p.cpu_scale for p in phases] == pytest.approx(1.0)
    assert weights @ [p.mem_scale for p in phases] == pytest.approx(1.0)
    env = CloudEnvironment(phase_sequence=phases)  # five phases: the one-hot grows to five
    assert env.state.max_phases == 5 and env.observation_space.shape == (23,)
    check_env(env, skip_render_check=True)


def test_update_metrics_from_a_trial_summary():
    from envs.state import metrics_from_trial
    from optimizer.foundation.allocation import Allocation
    from optimizer.trials.records import TrialSummary

    trial = TrialSummary(
        trial_id="t",
        status="completed",
        allocation=Allocation(2, 16, 24.0, 256),
        wall_time_s=600.0,
        throughput=700.0,
        cost=1.0,
        cpu_util_mean=50.0,
        gpu_util_mean=90.0,
        mem_gb_peak=12.0,
    )
    env = CloudEnvironment()
    env.reset(seed=0)
    vec = env.update_metrics(metrics_from_trial(trial, progress=0.5, phase=1, n_steps=20))
    idx = env.state.index
    assert vec[idx["gpu_util"]] == pytest.approx(0.9) and vec[idx["mem_util"]] == 0.5
    assert vec[idx["time_used"]] == pytest.approx(6000 / env.resolved.sla.time_max)
    assert env.state.get_sla_status()["time"]  # 600 s within the 1440 s pro-rata budget


def test_check_env_through_make_with_render_mode():
    env = gym.make(envs.ENV_ID, render_mode="ansi")
    check_env(env.unwrapped)  # with a spec: the render modes are checked too
    env.reset(seed=0)
    env.step(env.unwrapped.actions.noop)
    assert env.render().startswith("step 1/20 alloc g1 c8 m16 b128")


def test_reset_at_a_chosen_allocation():
    env = CloudEnvironment(workload="vgg16-v100", preference="cost")
    grid = env.model.grid
    default_obs, info = env.reset(seed=0)
    assert info["allocation"] == env._allocs[env.model.initial]
    alloc = dataclasses.replace(grid.allocation(env.model.initial), gpus=3, memory_gb=12.0)
    target = grid.index_of(alloc)
    as_tuple = (alloc.gpus, alloc.cpus, alloc.memory_gb, alloc.batch_size)
    for how in (target, grid.allocation(target), as_tuple):
        obs, info = env.reset(seed=0, options={"allocation": how})
        assert env.current_allocation == grid.allocation(target)
        assert info["allocation"] == env._allocs[target]
        assert not np.array_equal(obs, default_obs)  # the allocation entries differ
        _, _, _, _, step_info = env.step(env.actions.noop)
        assert step_info["allocation"] == env._allocs[target] and not step_info["changed"]
    # the next plain reset is back at the initial allocation
    assert np.array_equal(env.reset(seed=0)[0], default_obs)
    bad_options = (
        (env.model.n_alloc, "outside the grid"),
        ((1, 2), "tuple must be"),
        ("x", "must be"),
    )
    for bad, match in bad_options:
        with pytest.raises(ValueError, match=match):
            env.reset(seed=0, options={"allocation": bad})


def test_start_candidates_fit_the_first_chunk():
    env = CloudEnvironment(workload="vgg16-v100", preference="cost")
    starts = env.start_candidates()
    assert env.model.initial in starts and 0 < len(starts) < env.model.n_alloc
    for k in starts[:: max(1, len(starts) // 25)]:
        env.reset(seed=1, options={"allocation": int(k)})
        assert not env.step(env.actions.noop)[4]["oom"]
    outside = np.setdiff1d(np.arange(env.model.n_alloc), starts)[0]
    env.reset(seed=1, options={"allocation": int(outside)})
    assert env.step(env.actions.noop)[4]["oom"]

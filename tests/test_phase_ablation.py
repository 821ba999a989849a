"""The phase ablation (benchmarks/phase_ablation.py): its mask, its preset, its plan counts."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env

from envs import CloudEnvironment, EnvConfig, WorkloadModel, list_presets
from envs.oracle import best_static, optimal_policy

ROOT = Path(__file__).resolve().parents[1]
PRESET = "autoencoder-stream-cpu"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "phase_ablation", ROOT / "benchmarks" / "phase_ablation.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("phase_ablation", module)
    spec.loader.exec_module(module)
    return module


pa = _load_benchmark()


def _walk(env, actions, seed=0):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, _, term, _, _ = env.step(a)
        out.append(obs)
        if term:
            break
    return np.array(out)


def test_mask_zeroes_exactly_the_phase_fields():
    config = EnvConfig(workload=PRESET, preference="resource", noise=0.05)
    plain, masked = CloudEnvironment(config), pa.PhaseMask(CloudEnvironment(config))
    fields = plain.state.fields
    phase = np.array([f.startswith("phase_") for f in fields])
    assert phase.sum() == plain.resolved.max_phases
    assert list(np.flatnonzero(phase)) == list(masked.phase_columns)
    opt = optimal_policy(config)
    raw, hidden = _walk(plain, opt.actions, seed=3), _walk(masked, opt.actions, seed=3)
    assert raw.shape == hidden.shape
    # The raw one-hot moves through all three phases, so the mask has something to hide.
    assert len({tuple(r) for r in raw[:, phase]}) == 3
    assert (raw[:, phase].sum(axis=1) == 1).all()
    assert (hidden[:, phase] == 0).all()
    np.testing.assert_array_equal(hidden[:, ~phase], raw[:, ~phase])  # the rest untouched


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
def test_masked_env_passes_check_env_and_keeps_rewards():
    config = EnvConfig(workload=PRESET, noise=0.1)
    check_env(pa.PhaseMask(CloudEnvironment(config)), skip_render_check=True)
    plain, masked = CloudEnvironment(config), pa.PhaseMask(CloudEnvironment(config))
    plain.reset(seed=5), masked.reset(seed=5)
    memory_up, keep = 43, 40
    for a in (memory_up, keep, memory_up, keep, keep):
        r1 = plain.step(a)
        r2 = masked.step(a)
        assert r1[1] == r2[1] and r1[2] == r2[2]
        np.testing.assert_array_equal(r1[4]["reward_vector"], r2[4]["reward_vector"])
        assert r1[4]["allocation"] == r2[4]["allocation"]


def test_preset_loads_passes_check_env_and_has_three_phases():
    assert PRESET in list_presets()
    model = WorkloadModel.from_preset(PRESET)
    assert [p.name for p in model.phases] == ["load", "train", "done"]
    assert sum(p.fraction for p in model.phases) == pytest.approx(1.0, abs=1e-3)
    load, train, done = model.phases
    assert load.cpu_scale < 0.7 < train.cpu_scale and load.mem_scale < 0.4 < train.mem_scale
    check_env(CloudEnvironment(workload=PRESET), skip_render_check=True)
    env = CloudEnvironment(workload=PRESET)
    assert list(np.unique(env.model.step_phase)) == [0, 1, 2]  # every phase spans whole chunks


def test_dp_optimum_changes_allocation_at_phase_boundaries():
    config = EnvConfig(workload=PRESET, preference="resource")
    actions, allocs, phases = pa.optimal_plan(config)
    assert len(set(allocs)) > 1  # the oracle's plan is not constant
    counts = pa.plan_changes(allocs, phases)
    assert counts["boundaries"] == 2 and counts["boundary_changes"] == 2
    # Each phase has its own allocation, and following the phases beats every fixed target.
    by_phase = {p: {a for a, q in zip(allocs, phases, strict=True) if q == p} for p in set(phases)}
    assert all(len(s) == 1 for s in by_phase.values()) and len(set.union(*by_phase.values())) == 3
    assert optimal_policy(config).total_return > best_static(config).total_return + 1.0


def test_control_preset_has_one_phase():
    env = CloudEnvironment(workload=pa.CONTROL)
    assert len({p.phase_id for p in env.model.phases}) == 1


def test_plan_changes_counts_boundaries_and_others():
    a, b, c = (0, 1, 0.25, 32), (0, 1, 0.5, 64), (0, 2, 0.5, 64)
    got = pa.plan_changes([a, a, b, c, c, c], [0, 0, 1, 1, 2, 2])
    assert got == {"boundary_changes": 1, "other_changes": 1, "boundaries": 2}
    assert pa.plan_changes([a, a, a], [0, 1, 1]) == {
        "boundary_changes": 0,
        "other_changes": 0,
        "boundaries": 1,
    }


def test_stage_profile_reproduces_the_preset():
    traces_csv = pa.DATA / "traces.csv"
    if not traces_csv.is_file():
        pytest.skip(f"shared traces not found at {traces_csv}")
    profile = pa.stage_profile(pd.read_csv(traces_csv))
    preset = WorkloadModel.from_preset(PRESET).phases
    assert list(profile.name) == [p.name for p in preset]
    np.testing.assert_allclose(profile.fraction, [p.fraction for p in preset], atol=1e-3)
    np.testing.assert_allclose(profile.cpu_scale, [p.cpu_scale for p in preset], atol=1e-3)
    np.testing.assert_allclose(profile.mem_scale, [p.mem_scale for p in preset], atol=1e-3)


def test_arms_hide_the_phase_the_clock_or_both():
    config = EnvConfig(workload=PRESET, preference="resource", noise=0.0)
    fields = CloudEnvironment(config).state.fields
    phase = np.array([f.startswith("phase_") for f in fields])
    clock = np.array([f in ("progress", "time_used", "cost_used") for f in fields])
    opt = optimal_policy(config)
    raw = _walk(pa.make_env_fn(config, "phase")(), opt.actions, seed=1)
    assert raw[1:, clock].any(axis=0).all()  # the clock moves, so hiding it hides something
    for arm, hidden in (("masked", phase), ("clockless", clock), ("blind", phase | clock)):
        obs = _walk(pa.make_env_fn(config, arm)(), opt.actions, seed=1)
        assert (obs[:, hidden] == 0).all(), arm
        np.testing.assert_array_equal(obs[:, ~hidden], raw[:, ~hidden])
    with pytest.raises(SystemExit):
        pa.main(["--arms", "phase,deaf"])

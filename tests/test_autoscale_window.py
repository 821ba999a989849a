"""``phase-window`` (issue 40) on hand-made traces with planted phases.

Traces are sampled every second with 10-second cycles (10 samples a cycle); memory is twice
the CPU column, as in the other autoscaling tests.
"""

import numpy as np
import pytest

from phases.policies import (
    Execution,
    PhaseWindowPolicy,
    ReactiveMaxPolicy,
    ReactiveTrendPolicy,
    window_level,
)
from phases.policies.phase_window import NO_WINDOW

CYCLE = 10.0


def trace(values, phases, exec_id: str = "e", **kw) -> Execution:
    v = np.asarray(values, dtype=float)
    return Execution.from_arrays(
        exec_id, np.arange(len(v)), np.c_[v, 2 * v], CYCLE, ("cpu", "mem"),
        phases=np.asarray(phases, dtype=int), **kw,
    )


def falling(exec_id: str, scale: float = 1.0) -> Execution:
    """A heavy stage (phase 1, level 3) for 25 s, then a light one (phase 0, level 1)."""
    return trace(scale * np.r_[np.full(25, 3.0), np.ones(35)],
                 np.r_[np.ones(25), np.zeros(35)], exec_id)


def test_window_is_the_current_phase_run_when_it_is_long_enough():
    u = np.r_[np.full(6, 3.0), np.ones(4)][:, None]
    ph = np.r_[np.ones(6), np.zeros(4)]
    assert window_level(u, ph, "last-max", 3)[0] == 1.0  # 4 samples in phase 0: a new stage
    assert window_level(u, ph, "last-max", 5)[0] == 3.0  # too short a run: the whole cycle
    assert window_level(u, np.zeros(10), "last-max", 3)[0] == 3.0  # no change in the cycle
    # the trend's horizon counts the cycle's samples, not the window's
    ramp = np.r_[np.full(5, 9.0), 1.0 + 0.1 * np.arange(5)][:, None]
    level = window_level(ramp, np.r_[np.ones(5), np.zeros(5)], "recent-trend", 3)[0]
    assert level == pytest.approx(1.4 + 0.1 * 0.5 * 10)


def test_it_shrinks_in_a_phase_whose_usage_fell():
    """Trained on jobs whose light stage follows a heavy one, a job twice their size gets the
    light stage's level (with the 15% margin) one cycle after the fall; the phase-free peers
    hold the heavy stage's peak for that cycle."""
    policy = PhaseWindowPolicy().fit([falling("t1"), falling("t2", 0.5)])
    assert policy.min_run_.tolist() == [3, 3] and policy.headroom_.tolist() == [1.0, 1.0]
    calib = policy.calibration_
    assert (calib["over_pct"] < calib["peer_over_pct"]).all()
    assert (calib["under_pct"] <= calib["peer_under_pct"]).all()
    e = falling("x", 2.0)
    plan = policy.plan(e)
    peak = ReactiveMaxPolicy().fit([falling("t1")]).plan(e)
    # cycle 3 is decided from samples 20-29: 5 heavy, then 5 in the light phase
    assert peak[3].tolist() == [6.0, 12.0]
    assert plan[3] == pytest.approx([2.0 * 1.15, 4.0 * 1.15])
    assert plan[4:] == pytest.approx(np.tile([2.0, 4.0], (2, 1)))  # the light level itself
    later = e.cycle >= 1
    alloc = policy.allocate_samples(e)
    assert (e.usage[later] <= alloc[later] * 1.05).all()  # never short


def test_it_keeps_the_peer_when_the_dropped_peak_comes_back():
    """Every cycle opens with a 4-sample burst: lowering the level after a burst would leave
    the next one short, so the calibration keeps the phase-free level."""
    one = np.r_[np.full(4, 3.0), np.ones(6)]
    ph = np.r_[np.ones(4), np.zeros(6)]
    train = [trace(np.tile(one, 6), np.tile(ph, 6), f"t{i}") for i in range(2)]
    policy = PhaseWindowPolicy().fit(train)
    assert policy.min_run_.tolist() == [NO_WINDOW, NO_WINDOW]
    assert policy.headroom_.tolist() == [1.0, 1.0]
    e = trace(1.5 * np.tile(one, 5), np.tile(ph, 5), "x")
    plan = policy.plan(e)
    assert np.allclose(plan[:, 0], ReactiveMaxPolicy().fit(train).plan(e)[:, 0])
    assert np.allclose(plan[:, 1], ReactiveTrendPolicy().fit(train).plan(e)[:, 1])


def test_a_ramp_like_the_training_ones_is_never_short():
    """Memory climbing through loading stages (a new phase each 7 s, as in training) gets at
    least the phase-free levels: a ramp's latest samples are its highest, so the window
    never lowers them, and memory is never short."""
    t = np.arange(70.0)
    usage = np.r_[1.0 + t[:50] / 120.0, np.full(20, 1.0 + 49 / 120.0)]
    phases = (t // 7).astype(int) % 2  # loading stages alternate between two phases
    train = [trace(s * usage, phases, f"t{i}") for i, s in enumerate((0.5, 1.0, 3.0))]
    policy = PhaseWindowPolicy().fit(train)
    e = trace(2.0 * usage, phases, "x")
    alloc = policy.allocate_samples(e)
    peak = ReactiveMaxPolicy().fit(train).allocate_samples(e)[:, 0]
    trend = ReactiveTrendPolicy().fit(train).allocate_samples(e)[:, 1]
    later = e.cycle >= 1
    assert (alloc[later, 0] >= peak[later] - 1e-12).all()
    assert (alloc[later, 1] >= trend[later] - 1e-12).all()
    assert (e.usage[later, 1] <= alloc[later, 1] * 1.05).all()


def test_first_cycle_follows_the_cold_start():
    train = [falling("t1"), falling("t2", 0.5)]
    prior = np.c_[np.full(5, 7.0), np.full(5, 11.0)]
    e = falling("x", 2.0)
    e.prior_usage = prior
    assert PhaseWindowPolicy(cold_start="previous-run").fit(train).plan(e)[0].tolist() == [7, 11]
    pooled = PhaseWindowPolicy().fit(train)
    assert np.allclose(pooled.plan(e)[0], pooled.cold_start_)
    first = ReactiveTrendPolicy().fit(train).plan(e)[0]
    assert np.allclose(pooled.plan(e)[0], first)  # the same rule as every practical policy


def test_bad_parameters():
    train = [falling("t1")]
    with pytest.raises(ValueError, match="level"):
        PhaseWindowPolicy(memory_level="median").fit(train)
    with pytest.raises(ValueError, match="headrooms"):
        PhaseWindowPolicy(headrooms=(0.95, 1.0)).fit(train)
    with pytest.raises(ValueError, match="shrink"):
        PhaseWindowPolicy(shrink=0.9).fit(train)
    with pytest.raises(ValueError, match="min_runs"):
        PhaseWindowPolicy(min_runs=(0,)).fit(train)
    with pytest.raises(ValueError, match="phases"):
        PhaseWindowPolicy().fit([Execution.from_arrays("n", np.arange(30), np.ones(30), CYCLE)])

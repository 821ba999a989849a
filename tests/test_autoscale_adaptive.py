"""``phase-adaptive`` (issue 21) on hand-made traces, and the leave-one-workload-out split.

Traces are sampled every second with 10-second cycles; phases are planted by hand.
"""

import numpy as np
import pytest

from phases.evaluation.data import group_folds
from phases.policies import (
    Execution,
    PhaseAdaptivePolicy,
    ReactiveMaxPolicy,
    ReactiveTrendPolicy,
    job_levels,
)
from phases.policies.phase_adaptive import TREND_AHEAD, TREND_TAIL

CYCLE = 10.0


def trace(values, phases, exec_id: str = "e") -> Execution:
    v = np.asarray(values, dtype=float)
    return Execution.from_arrays(
        exec_id, np.arange(len(v)), np.c_[v, 2 * v], CYCLE, ("cpu", "mem"), phases=phases
    )


def burst(exec_id: str, scale: float = 1.0) -> Execution:
    """Base 1 for 30 s (a ramp-up phase 2 in its last 5 s), then a burst of 3 for 10 s; x4."""
    one = np.r_[np.ones(30), np.full(10, 3.0)]
    phases = np.r_[np.zeros(25, dtype=int), np.full(5, 2), np.ones(10, dtype=int)]
    rng = np.random.default_rng(len(exec_id))
    noise = 1 + 0.02 * rng.standard_normal(160)
    return trace(scale * np.tile(one, 4) * noise, np.tile(phases, 4), exec_id)


TRAIN = [burst("t1"), burst("t22", 4.0), burst("t333", 0.5)]


def test_job_levels_use_only_earlier_cycles():
    u = np.array([[1.0], [3.0], [2.0], [4.0], [5.0]])
    c = np.array([0, 0, 2, 2, 3])
    assert np.isnan(job_levels(u, c, 5, "last-max")[0, 0])
    assert job_levels(u, c, 5, "last-max")[1:, 0].tolist() == [3, 3, 4, 5]
    assert job_levels(u, c, 5, "running-max")[1:, 0].tolist() == [2, 2, 3, 5]
    assert job_levels(u, c, 5, "mean")[1:, 0].tolist() == [2, 2, 2.5, 3]


def test_recent_trend_carries_a_steady_rise_on_and_forgets_a_finished_ramp():
    t = np.arange(40.0)
    cycle = (t // 10).astype(int)
    leak = 1.0 + 0.1 * t[:, None]  # grows 0.1 a sample for ever
    levels = job_levels(leak, cycle, 4, "recent-trend")
    assert np.isnan(levels[0, 0])
    ahead = 0.1 * TREND_AHEAD * 10  # the slope carried half a 10-sample cycle on
    np.testing.assert_allclose(levels[1:, 0], [1.9 + ahead, 2.9 + ahead, 3.9 + ahead])
    ramp = np.minimum(1.0 + 2.0 * t, 3.0)[:, None]  # flat for the last TREND_TAIL samples
    np.testing.assert_allclose(job_levels(ramp, cycle, 4, "recent-trend")[1:, 0], 3.0)
    # only the last TREND_TAIL samples count: a rise before them is not carried on
    late = np.r_[np.linspace(1, 2, 10 - TREND_TAIL), np.full(TREND_TAIL, 2.0)][:, None]
    assert job_levels(late, np.zeros(10, int), 2, "recent-trend")[1, 0] == 2.0
    changed = leak.copy()
    changed[20:] += 5
    np.testing.assert_allclose(job_levels(changed, cycle, 4, "recent-trend")[:3],
                               levels[:3])  # cycles 0..2 are set before sample 20


def test_memory_follows_its_trend_and_cpu_its_last_peak():
    policy = PhaseAdaptivePolicy().fit(TRAIN)
    assert policy.levels_ == ("last-max", "recent-trend")
    assert PhaseAdaptivePolicy(memory_level=None).fit(TRAIN).levels_ == ("last-max",) * 2
    with pytest.raises(ValueError, match="level"):
        PhaseAdaptivePolicy(memory_level="median").fit(TRAIN)
    # a job whose memory leaks: the trend keeps up where the last peak falls behind
    t = np.arange(80.0)
    leaking = Execution.from_arrays(
        "leak", t, np.c_[np.ones(80), 1.0 + 0.05 * t], CYCLE, ("cpu", "mem"),
        phases=np.zeros(80, dtype=int),
    )
    train = [Execution.from_arrays(
        f"l{i}", t, np.c_[np.ones(80), s * (1.0 + 0.05 * t)], CYCLE, ("cpu", "mem"),
        phases=np.zeros(80, dtype=int)) for i, s in enumerate((0.5, 2.0))]

    def short(policy) -> int:
        alloc = policy.fit(train).allocate_samples(leaking)
        later = leaking.cycle >= 1
        return int((leaking.usage[later, 1] > 1.05 * alloc[later, 1]).sum())

    assert short(PhaseAdaptivePolicy()) < short(PhaseAdaptivePolicy(memory_level=None))
    # carried half a cycle on, the trend covers the first half of each coming cycle
    assert short(ReactiveTrendPolicy()) < short(ReactiveMaxPolicy()) / 2


def test_allocation_scales_with_the_job():
    """Two executions identical up to a factor get allocations in that factor (after the
    shared first-cycle rule), although the training jobs had other sizes."""
    policy = PhaseAdaptivePolicy().fit(TRAIN)
    small, big = burst("x", 1.0), burst("x", 7.0)
    a, b = policy.plan(small), policy.plan(big)
    assert np.allclose(b[1:], 7.0 * a[1:])
    assert not np.allclose(a[1:], a[1])  # it does follow the phases


def test_it_uses_only_the_past():
    policy = PhaseAdaptivePolicy().fit(TRAIN)
    e = burst("x")
    changed = burst("x")
    changed.usage[70:] *= 5.0
    changed.phases = changed.phases.copy()
    changed.phases[70:] = 1
    a, b = policy.plan(e), policy.plan(changed)
    assert np.allclose(a[:8], b[:8])  # cycles 0..7 are decided before sample 70
    assert not np.allclose(a[8:], b[8:])


def test_it_provisions_ahead_of_the_predicted_burst():
    """The cycle before each burst is decided in the ramp-up phase 2, which the graph says
    leads to the burst phase: the allocation rises before the burst, not after it."""
    e = burst("x")
    ahead = PhaseAdaptivePolicy().fit(TRAIN).plan(e)[:, 0]
    blind = PhaseAdaptivePolicy(lookahead=False).fit(TRAIN).plan(e)[:, 0]
    burst_cycles = np.array([7, 11, 15])  # decided at t = 69, 109, 149 (phase 2)
    peak = e.usage[:, 0].reshape(-1, 10).max(axis=1)[burst_cycles]
    assert np.all(ahead[burst_cycles] >= 0.95 * peak)
    assert np.all(blind[burst_cycles] < 0.5 * peak)
    base_cycles = np.array([5, 9, 13])  # plain base cycles, well inside phase 0
    assert np.allclose(ahead[base_cycles], blind[base_cycles])


def test_dwell_time_decides_when_the_phase_is_about_to_end():
    policy = PhaseAdaptivePolicy().fit(TRAIN)
    fresh = policy.occupancy(np.array([1, 0]))
    due = policy.occupancy(np.r_[np.ones(5, dtype=int), np.zeros(25, dtype=int)])
    i0, i2 = (np.flatnonzero(policy.labels_ == p)[0] for p in (0, 2))
    assert due[i2] > fresh[i2]  # 25 samples in phase 0: the ramp-up is due
    assert fresh[i0] > due[i0]


def test_memory_has_its_own_quantile():
    """A higher memory quantile raises memory's allocation only; CPU's stays as it was."""
    base = PhaseAdaptivePolicy().fit(TRAIN)
    high = PhaseAdaptivePolicy(memory_quantile=0.99).fit(TRAIN)
    assert high.quantiles_.tolist() == [0.9, 0.99]
    e = burst("x", 2.0)
    a, b = base.plan(e), high.plan(e)
    assert np.allclose(a[:, 0], b[:, 0])
    assert (b[1:, 1] >= a[1:, 1] - 1e-12).all() and (b[1:, 1] > a[1:, 1] + 1e-9).any()


def test_bad_parameters():
    with pytest.raises(ValueError, match="quantile"):
        PhaseAdaptivePolicy(quantile=0).fit(TRAIN)
    with pytest.raises(ValueError, match="quantile"):
        PhaseAdaptivePolicy(memory_quantile=1.5).fit(TRAIN)
    with pytest.raises(ValueError, match="level"):
        PhaseAdaptivePolicy(level="median").fit(TRAIN)


def test_leave_one_group_out_never_trains_on_the_held_out_group():
    ex = [burst(f"e{i}") for i in range(6)]
    groups = {f"e{i}": "ab"[i % 2] if i < 4 else "c" for i in range(6)}
    folds = group_folds(ex, groups)
    assert len(folds) == 3
    for train, test in folds:
        held = {groups[e.exec_id] for e in test}
        assert len(held) == 1 and not held & {groups[e.exec_id] for e in train}
    assert sorted(e.exec_id for _, te in folds for e in te) == sorted(groups)

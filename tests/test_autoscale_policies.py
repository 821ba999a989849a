"""Autoscaling policies on hand-made traces whose right allocations are known.

Traces are sampled every second with 10-second cycles; phases are planted by hand so the
phase policies are tested without fitting a CRBM.
"""

import numpy as np
import pytest

from phases.policies import (
    POLICIES,
    Execution,
    PhaseProactivePolicy,
    PhaseRulesPolicy,
    ReactiveMaxPolicy,
    VPAPolicy,
    decaying_percentile,
    make_policy,
    visit_probabilities,
)

CYCLE = 10.0
RESOURCES = ("cpu", "mem")


def trace(values: np.ndarray, phases=None, exec_id: str = "e") -> Execution:
    """One execution sampled at t = 0, 1, 2, ... s; ``values`` is (n,) or (n, 2)."""
    v = np.asarray(values, dtype=float)
    usage = np.c_[v, 2 * v] if v.ndim == 1 else v
    return Execution.from_arrays(
        exec_id,
        np.arange(len(usage)),
        usage,
        CYCLE,
        RESOURCES,
        phases=None if phases is None else np.asarray(phases),
    )


def fitted(name: str, train, **kw):
    policy = make_policy(name, **kw)
    return policy.fit(train)


def test_cycles_follow_the_time_column():
    e = Execution.from_arrays("x", [5.0, 9.9, 15.0, 15.1, 34.9], np.ones(5), 10.0)
    assert e.cycle.tolist() == [0, 0, 1, 1, 2]
    assert e.n_cycles == 3


# ----------------------------------------------------------------------------- constant trace


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_constant_trace_gets_its_level(name):
    e = trace(np.full(50, 2.0), phases=np.zeros(50, dtype=int))
    plan = fitted(name, [e, trace(np.full(40, 2.0), np.zeros(40, dtype=int), "t")]).plan(e)
    assert plan.shape == (5, 2)
    expected = np.array([2.0, 4.0])
    if name == "vpa":
        # 90th percentile (one 5% bucket of rounding up at most) plus the 15% safety margin
        assert np.all(plan[1:] >= expected * 1.15 - 1e-9)
        assert np.all(plan[1:] <= expected * 1.15 * 1.05 + 1e-9)
        assert np.allclose(plan[0], expected)  # cold start: mean + 2 std of a constant
    else:
        assert np.allclose(plan, expected), plan


# ----------------------------------------------------------------------------- step


def step_trace() -> Execution:
    return trace(np.r_[np.ones(30), np.full(30, 3.0)], phases=np.r_[np.zeros(30), np.ones(30)])


def test_oracles_and_static_on_a_step():
    e = step_trace()
    cpu = lambda name: fitted(name, [e]).plan(e)[:, 0]  # noqa: E731
    assert cpu("oracle-max").tolist() == [1, 1, 1, 3, 3, 3]
    assert cpu("oracle-rules").tolist() == [1, 1, 1, 3, 3, 3]
    assert cpu("static-peak").tolist() == [3] * 6


def test_reactive_policies_lag_one_cycle_behind_a_step():
    e = step_trace()
    for name in ("reactive-max", "reactive-rules"):
        plan = fitted(name, [e]).plan(e)[:, 0]
        assert plan[1:].tolist() == [1, 1, 1, 3, 3], name
    # cold start: mean + 2 std of the training samples (1 and 3 in equal numbers -> 2 + 2)
    assert fitted("reactive-max", [e]).plan(e)[0, 0] == pytest.approx(4.0)
    first = ReactiveMaxPolicy(cold_start="first-cycle").fit([e]).plan(e)[0, 0]
    assert first == pytest.approx(1.0)
    # previous run: its peak, where the job has one; else the pooled rule
    prior = ReactiveMaxPolicy(cold_start="previous-run").fit([e])
    assert prior.plan(e)[0, 0] == pytest.approx(4.0)
    e.prior_usage = np.array([[2.0, 4.0], [2.5, 3.0], [1.0, 2.0]])
    assert prior.plan(e)[0].tolist() == [2.5, 4.0]
    assert prior.plan(e)[1:, 0].tolist() == [1, 1, 1, 3, 3]  # later cycles unchanged


def test_previous_runs_are_the_same_jobs_in_order():
    from phases.evaluation.data import attach_previous_runs

    runs = [trace(np.full(20, v), exec_id=f"e{i}") for i, v in enumerate((1.0, 2.0, 3.0))]
    assert attach_previous_runs(runs, {"e0": "a", "e1": "b", "e2": "a"}) == 1
    assert runs[0].prior_usage is None and runs[1].prior_usage is None
    assert runs[2].prior_usage[:, 0].max() == 1.0  # e0, the job's run before it


def test_reactive_rules_adds_two_std_of_the_last_cycle():
    e = trace(np.tile([1.0, 3.0], 15))  # each cycle: mean 2, std 1
    plan = fitted("reactive-rules", [e]).plan(e)[:, 0]
    assert np.allclose(plan[1:], 4.0)


def test_vpa_lags_a_step_and_bumps_memory_after_an_oom():
    e = step_trace()
    vpa = VPAPolicy(half_life_s=5.0, memory_interval_s=10.0).fit([trace(np.ones(60))])
    plan = vpa.plan(e)
    assert plan[3, 0] == pytest.approx(1.15, rel=0.06)  # still the old level
    # cycle 3 ran over its memory allocation (6 > 2.3): an OOM; cycle 4 gets the bump-up
    assert plan[4, 1] >= 6.0 * 1.2 * 1.15 - 1e-9
    assert plan[4, 0] == pytest.approx(3.0 * 1.15, rel=0.06)  # CPU: no bump


def test_vpa_half_life_scales_with_trace_length():
    train = [trace(np.ones(80)), trace(np.ones(40), exec_id="b")]
    vpa = VPAPolicy().fit(train)
    assert vpa.half_life_ == pytest.approx(np.median([79.0, 39.0]) / 8)
    assert vpa.is_memory_.tolist() == [False, True]


def test_decaying_percentile_weighs_recent_samples_more():
    values = np.r_[np.full(10, 1.0), np.full(10, 5.0)]
    times = np.arange(20.0)
    recent = decaying_percentile(values, times, 20.0, 0.4, half_life=1.0, first=0.01)
    flat = decaying_percentile(values, times, 20.0, 0.4, half_life=1e9, first=0.01)
    assert recent >= 5.0 and recent <= 5.0 * 1.06
    assert flat < 1.1


# ----------------------------------------------------------------------------- periodic burst


def burst_trace(exec_id: str = "b", scale: float = 1.0) -> Execution:
    """Base usage 1 for 30 s, a burst of 3 for 10 s, repeated 4 times; phase 1 = burst."""
    one = np.r_[np.ones(30), np.full(10, 3.0)]
    phases = np.r_[np.zeros(30, dtype=int), np.ones(10, dtype=int)]
    return trace(scale * np.tile(one, 4), np.tile(phases, 4), exec_id)


def test_phase_rules_misses_the_burst_that_proactive_provisions():
    e = burst_trace()
    train = [burst_trace("t1"), burst_trace("t2")]
    rules = PhaseRulesPolicy(stats="absolute").fit(train)
    proactive = PhaseProactivePolicy(stats="absolute", threshold=0.25).fit(train)
    burst_cycles = np.arange(3, 16, 4)
    r, p = rules.plan(e)[:, 0], proactive.plan(e)[:, 0]
    assert np.allclose(r[burst_cycles], 1.0)  # decided in the base phase: too little
    assert np.allclose(p[burst_cycles], 3.0)  # graph: burst within a cycle w.p. 0.29 > 0.25
    strict = PhaseProactivePolicy(stats="absolute", threshold=0.5).fit(train)
    assert np.allclose(strict.plan(e)[burst_cycles, 0], 1.0)


def test_visit_probabilities_match_the_geometric_dwell():
    p = np.array([[29 / 30, 1 / 30], [0.1, 0.9]])
    v = visit_probabilities(p, 10)
    assert v[0, 1] == pytest.approx(1 - (29 / 30) ** 10)
    assert v[1, 0] == pytest.approx(1 - 0.9**10)
    assert np.allclose(np.diag(v), 1.0)


def test_relative_phase_stats_fit_jobs_of_different_sizes():
    small, big = burst_trace("s", 1.0), burst_trace("b", 10.0)
    train = [burst_trace("t1", 1.0), burst_trace("t2", 10.0)]
    relative = PhaseRulesPolicy(stats="relative", level="last").fit(train)
    pooled = PhaseRulesPolicy(stats="absolute").fit(train)
    # phase 0 (base) samples relative to the last cycle's level: 1 after a base cycle (80
    # samples per execution), 1/3 after a burst (30): the same ratios for both sizes
    ratios = np.r_[np.ones(80), np.full(30, 1 / 3)]
    upper = ratios.mean() + 2 * ratios.std()
    base = np.array([1, 2, 5, 6])  # cycles decided at the end of a base cycle
    assert np.allclose(relative.plan(small)[base, 0], upper)
    assert np.allclose(relative.plan(big)[base, 0], 10 * upper)
    # pooled statistics mix both sizes: mean 5.5, std 4.5 -> 14.5 for either job
    assert np.allclose(pooled.plan(small)[base, 0], 14.5)
    assert np.allclose(pooled.plan(big)[base, 0], 14.5)


def test_phase_policies_need_phases():
    with pytest.raises(ValueError, match="phases"):
        PhaseRulesPolicy().fit([trace(np.ones(30))])


def test_history_policies_never_see_the_future():
    """Changing samples after a cycle starts leaves that cycle's allocation unchanged."""
    rng = np.random.default_rng(0)
    base = rng.uniform(1, 2, size=80)
    ph = (base > 1.5).astype(int)
    train = [trace(rng.uniform(1, 2, size=60), rng.integers(0, 2, size=60), "t")]
    for name in POLICIES:
        policy = make_policy(name).fit(train)
        if policy.uses_future:
            continue
        a = policy.plan(trace(base, ph))
        b = policy.plan(trace(np.r_[base[:40], base[40:] * 5], ph))
        assert np.allclose(a[:5], b[:5]), name


def test_unknown_policy_and_bad_parameters():
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("magic")
    with pytest.raises(ValueError, match="cold_start"):
        make_policy("reactive-max", cold_start="never").fit([trace(np.ones(20))])
    with pytest.raises(ValueError, match="threshold"):
        PhaseProactivePolicy(threshold=0).fit([burst_trace()])

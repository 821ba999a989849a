"""The job's stages as the environment's phases (issue 40): parallel fractions from stage
durations or busy cores, the order and shares of a reference run, and a per-stage plan whose
cores differ where the stages' scaling does."""

from __future__ import annotations

import pytest

from envs import CloudEnvironment, EnvConfig
from envs.model import EnvModel
from envs.oracle import optimal_policy
from optimizer.foundation.allocation import Allocation
from optimizer.search.live.live_plan import (
    plan_from_decisions,
    stage_env_config,
    static_forecast,
)
from optimizer.search.live.stage_model import (
    STAGE_IDS,
    _parallel,
    build_stage_model,
    stage_phases,
)
from optimizer.search.live.stage_polish import polish_cores, stage_forecast


def _rows(trial, cpus, spans, busy, status="completed"):
    t, out = 0.0, []
    for stage, seconds in spans:
        out.append({"trial": trial, "status": status, "stage": stage, "start_s": t,
                    "end_s": t + seconds, "seconds": seconds, "cores_busy": busy[stage],
                    "mem_peak_gb": {"startup": 0.3, "train": 0.5, "eval": 0.45}[stage],
                    "cpus": cpus, "wall_s": sum(s for _, s in spans)})
        t += seconds
    return out


def _model():
    one = _rows("c1", 1, [("startup", 10), ("train", 20), ("eval", 5)],
                {"startup": 1.0, "train": 1.0, "eval": 1.0})
    two = _rows("c2", 2, [("startup", 10), ("train", 11), ("eval", 5)],
                {"startup": 1.0, "train": 1.8, "eval": 1.0})
    return build_stage_model(one + two, reference_cpus=2)


def test_parallel_fraction_from_durations_then_from_busy_cores():
    assert _parallel({1: 20.0, 2: 11.0}, {})[0] == pytest.approx(0.9)
    assert _parallel({1: 10.0, 2: 10.0}, {})[0] == pytest.approx(0.0)
    # 1.8 cores busy out of 2: 1 / ((1 - p) + p / 2) = 1.8
    p, why = _parallel({2: 11.0}, {2: 1.8})
    assert p == pytest.approx((1 - 1 / 1.8) / 0.5) and "busy" in why
    assert _parallel({1: 5.0}, {1: 1.0}) == (0.0, "not measured above one core: taken as "
                                               "serial")


def test_stage_model_order_shares_and_statistics():
    model = _model()
    assert model.reference_cpus == 2 and model.reference_seconds == pytest.approx(26)
    assert [s for s, _ in model.sequence] == ["startup", "train", "eval"]
    assert [round(x, 3) for _, x in model.sequence] == [round(10 / 26, 3), round(11 / 26, 3),
                                                         round(5 / 26, 3)]
    assert model.stats["train"].parallel == pytest.approx(0.9)
    assert model.stats["startup"].parallel == pytest.approx(0.0) and model.has_phases
    # No whole run: a probe's start-up, its cut training run on to the job's predicted end.
    probe = _rows("p", 2, [("startup", 2), ("train", 3)], {"startup": 1.0, "train": 1.9},
                  "probe")
    probe[-1]["complete"] = False
    for r in probe:
        r["job_s"] = 20.0
    model = build_stage_model(probe)
    assert model.sequence == [("startup", pytest.approx(0.1)), ("train", pytest.approx(0.9))]
    assert model.stats["startup"].seconds == {2: 2.0} and model.stats["train"].seconds == {}
    assert build_stage_model(_rows("f", 2, [("train", 5)], {"train": 1.9}, "failed")) is None


def test_stage_phases_keep_the_measured_time_at_the_reference_cores():
    phases = stage_phases(_model(), train_parallel=0.9)
    assert [p.name for p in phases] == ["startup", "train", "eval"]
    assert [p.phase_id for p in phases] == [STAGE_IDS[s] for s in ("startup", "train", "eval")]
    startup = phases[0]
    # Serial start-up: at 2 cores its work takes as long per chunk as training's does.
    assert startup.parallel == 0.0 and startup.cpu_scale == pytest.approx((0.1 + 0.45) / 1.0)
    assert startup.mem_scale == pytest.approx(0.3 / 0.5)


def test_the_stage_environment_wants_fewer_cores_only_in_the_serial_stages():
    config = EnvConfig(workload="mlp-cpu", preference="balanced")
    workload = CloudEnvironment(config).resolved.workload
    static = Allocation(0, 2, 2.0, 128)
    cfg = stage_env_config(config.replace(workload=workload), _model(), static)
    assert cfg.sla.time_max == pytest.approx(26 * 1.05, rel=0.05)  # the static run, +5%
    res = optimal_policy(cfg)
    m = EnvModel(cfg)
    rows = [{"phase": m.phases[int(p)].phase_id, "cpus": a.cpus}
            for p, a in zip(m.step_phase, res.allocations, strict=True)]
    plan = plan_from_decisions(rows, _model(), static, "optimal")
    assert plan.phases["startup"].allocation.cpus == 1
    assert plan.phases["train"].allocation.cpus == 2
    assert plan.phases["eval"].allocation.cpus == 1
    assert plan.memory_max_gb == 2.0 and plan.fallback.cpus == 2
    assert plan.phases["startup"].allocation.memory_gb < plan.phases["train"].allocation.memory_gb
    time_s, cost = static_forecast(cfg, static)
    assert res.total_cost < 0.9 * cost and res.total_time_s <= time_s * 1.05


def test_the_scripts_own_batch_is_the_one_its_trials_ran_with():
    """A static recommendation at "the script's own batch" (one cloudopt cannot set, batch
    None) plans at the batch the model kept fixed; it had no plan (total_samples NaN)."""
    config = EnvConfig(workload="mlp-cpu", preference="balanced")
    workload = CloudEnvironment(config).resolved.workload
    config = config.replace(workload=workload, batch_sizes=[128], batch_actions=False)
    cfg = stage_env_config(config, _model(), Allocation(0, 2, 2.0, None))
    assert cfg.initial.batch_size == 128 and cfg.batch_sizes == [128]
    assert cfg.total_samples > 0 and cfg.sla.time_max == pytest.approx(26 * 1.05, rel=0.05)


def test_a_stage_of_many_short_intervals_is_kept_as_one_block():
    """Twenty checkpoints of 0.8% each are 16% of the run: kept (as one block after the
    training they interrupt); a stage whose whole share is under 2% is folded."""
    from optimizer.search.live.stage_model import _fold

    seq = [("startup", 0.1)]
    for _ in range(20):
        seq += [("train", 0.032), ("save", 0.008)]
    seq += [("pause", 0.01), ("eval", 0.09)]
    folded = _fold(seq)
    assert [s for s, _ in folded] == ["startup", "train", "save", "eval"]
    shares = dict(folded)
    assert shares["save"] == pytest.approx(0.16)
    assert shares["train"] == pytest.approx(0.64 + 0.01)  # the short pause joins training
    assert sum(shares.values()) == pytest.approx(1.0)
    assert _fold([("startup", 0.01), ("train", 0.99)]) == [("train", pytest.approx(1.0))]


def _fake_planning(monkeypatch, preference, plan_for):
    """build_live_plan on a three-stage model whose agents are replaced by ``plan_for(cfg)``,
    which returns ``{policy: (time share of the limit, cost share of the limit, return,
    cores per stage[, seconds per stage])}``; returns a builder and the SLA weights the agents were trained at."""
    import pandas as pd

    import optimizer.search.recommend as rec_mod
    from optimizer.foundation.config import load_config
    from optimizer.search.live import live_plan
    from optimizer.search.recommend import PolicyOutcome

    rows = {"c1": _rows("c1", 1, [("startup", 10), ("train", 20), ("eval", 5)],
                        {"startup": 1.0, "train": 1.0, "eval": 1.0}),
            "c2": _rows("c2", 2, [("startup", 10), ("train", 11), ("eval", 5)],
                        {"startup": 1.0, "train": 1.8, "eval": 1.0})}
    monkeypatch.setattr(live_plan, "trial_stage_rows", lambda d, s, **kw: rows[d])
    config = EnvConfig(workload="mlp-cpu", preference=preference)
    config = config.replace(workload=CloudEnvironment(config).resolved.workload)
    static = Allocation(0, 2, 2.0, 128)
    weights = []
    stages = [STAGE_IDS["startup"], STAGE_IDS["train"], STAGE_IDS["eval"]]

    def fake(env_config, opt_config, **kw):
        weights.append(env_config.sla_weight)
        outcomes, plans = [], {}
        for name, (t, c, ret, cores, *secs) in plan_for(env_config).items():
            outcomes.append(PolicyOutcome(
                name, ret, ret / 10, env_config.sla.time_max * t, env_config.sla.cost_max * c,
                False, [Allocation(0, k, 2.0, 128) for k in cores]))
            plans[name] = [{"phase": p, "cpus": k, "step_time_s": x}
                           for p, k, x in zip(stages, cores, *(secs or [[1.0] * 3]), strict=True)]
        agent = max(outcomes, key=lambda o: o.total_return).name
        return type("R", (), {"agent": agent, "outcomes": outcomes, "plans": plans,
                              "decisions": pd.DataFrame(plans[agent])})()

    monkeypatch.setattr(rec_mod, "recommend", fake)

    def build():
        weights.clear()
        return live_plan.build_live_plan([(None, "c1"), (None, "c2")], config,
                                         load_config(None), static, time_budget_s=1.0)

    return build, weights, config


def test_a_plan_that_breaks_the_limits_is_trained_again_with_them_weighed_more(monkeypatch):
    """Under `cost` the reward may rate a plan's savings above its time overrun; the live plan
    keeps the static allocation's cost and at most 5% more time: the agents are trained again
    with the limits weighed more, and a plan that still breaks them is not made."""
    from optimizer.search.live import live_plan

    over = {}

    def plans(cfg):
        t = over["strict" if cfg.sla_weight == live_plan.LIMIT_WEIGHT else "first"]
        return {"reinforce": (t, 0.7, 5.0, [1, 1, 1]), "best-static": (1 / 1.05, 1.0, 4.0,
                                                                       [2, 2, 2])}

    build, weights, config = _fake_planning(monkeypatch, "cost", plans)
    over.update(first=1.3, strict=1.2)  # broken, and broken again
    result = build()
    assert result.plan is None and "breaks the live plan's limits" in result.why
    assert not result.outcomes["reinforce"]["within_limits"]
    assert weights == [config.sla_weight, live_plan.LIMIT_WEIGHT]
    over.update(first=1.3, strict=0.99)  # kept once the limits weigh more
    result = build()
    assert result.plan is not None and "trained again with the limits" in result.why
    assert result.env_config.sla_weight == live_plan.LIMIT_WEIGHT
    over.update(first=0.99)  # kept from the start: trained once
    result = build()
    assert result.plan is not None and "trained again" not in result.why
    assert weights == [config.sla_weight]


def test_the_whole_jobs_forecast_chooses_the_plan_not_the_per_interval_reward(monkeypatch):
    """eval_heavy: the reward rated the best static allocation above reinforce's plan (its
    evaluation on one core, 2.5% slower and 17% cheaper over the job) because it checks the
    time limit per interval. Over the whole job the plan keeps the limits and scores better
    under the preference, so it is the live plan; a plan that gains too little is not."""
    plan = {"reinforce": (1.025 / 1.05, 0.83, 8.6, [2, 2, 1]),
            "best-static": (1 / 1.05, 1.0, 9.5, [2, 2, 2])}
    build, _, _ = _fake_planning(monkeypatch, "balanced", lambda cfg: plan)
    result = build()
    assert result.plan is not None
    assert result.plan.phases["eval"].allocation.cpus == 1
    assert result.plan.phases["train"].allocation.cpus == 2
    assert "reward preferred best-static" in result.why and "17% cheaper" in result.why
    assert result.outcomes["reinforce"]["job_score"] < 0.98
    # 1% cheaper, 3% slower, one core in a short stage: 0.999 of static's score
    plan["reinforce"] = (1.03 / 1.05, 0.99, 8.6, [2, 2, 1], [1.0, 10.0, 0.5])
    result = build()
    assert "no agent's per-stage plan beat it" in result.why
    assert result.outcomes["reinforce"]["job_score"] > 0.98
    # ... and the static allocation, finished stage by stage on the whole job's forecast,
    # takes one core where the stage model's work is serial (start-up, evaluation)
    cores = {s: e.allocation.cpus for s, e in result.plan.phases.items()}
    assert cores == {"startup": 1, "train": 2, "eval": 1}
    assert result.plan.source.startswith("the static allocation's cores, improved stage by")
    assert "startup 2 -> 1, eval 2 -> 1 cores" in result.why


def _stage_cfg(preference="cost"):
    config = EnvConfig(workload="mlp-cpu", preference=preference)
    config = config.replace(workload=CloudEnvironment(config).resolved.workload)
    static = Allocation(0, 2, 2.0, 128)
    return stage_env_config(config, _model(), static), static


def test_a_stage_forecast_of_the_static_cores_is_the_static_forecast():
    cfg, static = _stage_cfg()
    m = EnvModel(cfg)
    f = stage_forecast(m, {}, static)
    assert (f.time_s, f.cost) == pytest.approx(static_forecast(cfg, static))
    assert f.mean_cpus == pytest.approx(2.0)
    one = stage_forecast(m, {STAGE_IDS["startup"]: 1}, static)
    # the start-up's work is serial here: a core fewer costs no time and saves money
    assert one.time_s == pytest.approx(f.time_s, rel=1e-6) and one.cost < f.cost
    assert 1.0 < one.mean_cpus < 2.0


def test_polishing_moves_the_serial_stages_and_keeps_the_time_limit():
    """checkpoint_heavy's case: an agent's plan held a serial stage at 2 cores. Coordinate
    descent on the whole job's forecast takes the core back; the parallel stage keeps its two,
    since one would break the time limit; a plan with nothing to gain is left as it was."""
    from optimizer.search.live.live_plan import job_score, within_limits

    cfg, static = _stage_cfg("cost")
    m = EnvModel(cfg)
    weights = [1.0, 0.0, 0.0]

    def score(f):
        return job_score(f.time_s, f.cost, f.mean_cpus, static, cfg.sla, weights)

    def keeps(f):
        return within_limits(f.time_s, f.cost, cfg.sla)

    ids = {s: STAGE_IDS[s] for s in ("startup", "train", "eval")}
    start = {ids["startup"]: 2, ids["train"]: 2, ids["eval"]: 1}
    done = polish_cores(m, start, static, score, keeps)
    assert done.cores == {ids["startup"]: 1, ids["train"]: 2, ids["eval"]: 1}
    assert done.moves == [(ids["startup"], 2, 1)]
    assert keeps(done.forecast) and done.score < score(stage_forecast(m, start, static))
    # on one core the training stage alone would break the limit the plan must keep
    assert not keeps(stage_forecast(m, {**done.cores, ids["train"]: 1}, static))
    again = polish_cores(m, done.cores, static, score, keeps)
    assert again.moves == [] and again.cores == done.cores

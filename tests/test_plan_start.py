"""Where the agents' plan starts and what its whole-job forecast includes (found on the H200:
gpuresnet's plans sat near 60 GB for a 2.4-GB job, and forecast 3.3 s for a 15-s job)."""

import dataclasses

import pytest

from envs.workload import WorkloadModel
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig, SLAConfig
from optimizer.search.calibrate import env_config_from_trials
from optimizer.search.planning import initial_allocation
from optimizer.search.recommend import _outcome
from optimizer.trials.records import TrialSummary


def _trials():
    params = dataclasses.replace(WorkloadModel.from_preset("vgg16-v100").params, noise_scale=0.0)
    model = WorkloadModel(params=params)
    out = []
    for i, (c, b) in enumerate([(16, 32), (4, 32), (16, 64)]):
        p = model.predict(1, c, float("inf"), b)
        out.append(TrialSummary(
            trial_id=f"t{i}", status="completed", allocation=Allocation(1, c, 64.0, b),
            throughput=float(p["throughput"]), samples=6400, wall_time_s=6400 / float(
                p["throughput"]) + 10.0, mem_gb_peak=2.0 + 0.001 * b, cpu_util_mean=20.0,
            gpu_util_mean=80.0, total_samples=64000))
    return out


def test_the_plan_starts_from_the_memory_the_reference_needs():
    trials = _trials()
    res = ResourceConfig(gpu_count_max=1, cpu_count_max=16, memory_max=128.0)
    config = env_config_from_trials(trials, resources=res, sla=SLAConfig(time_max=1e6,
                                                                         cost_max=1e6))
    start = initial_allocation(config, trials[0])
    assert start.memory_gb < 4.0  # the peak is about 2.05 GB, the probe ran under 64


def test_a_forecast_counts_the_start_up_once_at_the_first_price():
    rows = [{"elapsed_s": 3.0 * (k + 1), "spent": 0.003 * (k + 1), "step_time_s": 3.0,
             "step_cost": 0.003, "oom": False, "gpus": 1, "cpus": 1, "memory_gb": 2.0,
             "batch_size": 512} for k in range(2)]
    sla = SLAConfig(time_max=20.0, cost_max=1.0)
    out = _outcome("best-static", 1.0, rows, 1.0, sla, startup_s=10.0)
    assert out.total_time_s == pytest.approx(16.0)
    assert out.total_cost == pytest.approx(0.006 + 0.001 * 10.0)
    assert out.sla_ok and not _outcome("best-static", 1.0, rows, 1.0,
                                       SLAConfig(time_max=15.0, cost_max=1.0), 10.0).sla_ok


def test_a_fallback_says_when_every_allowed_setting_was_measured():
    # tab_transformer without a batch flag on 2 cores: its two settings were both measured.
    from optimizer.search.planning import _all_measured

    res = ResourceConfig(gpu_count_max=0, cpu_count_max=2, memory_max=8.0)
    both = [TrialSummary(trial_id=f"t{c}", status="completed", throughput=1.0,
                         allocation=Allocation(0, c, 4.0, 64)) for c in (1, 2)]
    assert "every setting these bounds allow" in _all_measured(res, both)
    assert _all_measured(res, both[:1]) == ""
    other_batch = [both[0], TrialSummary(trial_id="b", status="completed", throughput=1.0,
                                         allocation=Allocation(0, 2, 4.0, 128))]
    assert _all_measured(res, other_batch) == ""

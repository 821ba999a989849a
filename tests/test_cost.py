"""ResourceCostCalculator arithmetic against hand-computed values."""

import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.cost import ResourceCostCalculator
from optimizer.trials.records import TrialSummary

CALC = ResourceCostCalculator(cost_per_gpu_hour=2.0, cost_per_cpu_hour=0.05, cost_per_gb_hour=0.01)


def test_hourly_cost():
    # 1 GPU × 2.0 + 4 CPU × 0.05 + 16 GB × 0.01 = 2.36 $/h
    assert CALC.calculate_hourly_cost(Allocation(gpus=1, cpus=4, memory_gb=16)) == pytest.approx(2.36)
    assert CALC.calculate_hourly_cost({"gpu_count": 0, "cpu_count": 2, "memory": 8}) == \
        pytest.approx(0.18)
    assert CALC.calculate_cost(Allocation(gpus=1, cpus=4, memory_gb=16), 1800) == pytest.approx(1.18)
    cfg = ResourceConfig(gpu_count_max=1, cpu_count_max=4, memory_max=16.0, cost_per_gpu_hour=3.0)
    assert ResourceCostCalculator.from_config(cfg).cost_per_gpu_hour == 3.0


def test_compare_configurations_hand_computed():
    base = Allocation(gpus=0, cpus=4, memory_gb=8)    # 0.28 $/h
    opt = Allocation(gpus=0, cpus=2, memory_gb=8)     # 0.18 $/h
    r = CALC.compare_configurations(base, opt, baseline_time_s=3600, optimized_time_s=5400,
                                    preference="cost")
    assert r["hourly_cost_baseline"] == pytest.approx(0.28)
    assert r["hourly_cost_optimized"] == pytest.approx(0.18)
    assert r["hourly_cost_change"] == pytest.approx(-0.10)
    assert r["total_cost_baseline"] == pytest.approx(0.28)
    assert r["total_cost_optimized"] == pytest.approx(0.27)        # 0.18 × 1.5 h
    assert r["total_cost_change_pct"] == pytest.approx(100 * (0.27 / 0.28 - 1))
    assert r["time_change_pct"] == pytest.approx(50.0)
    assert r["resource_changes"]["cpus"] == {"baseline": 4, "optimized": 2, "change": -2}
    assert r["resource_changes"]["memory_gb"]["change"] == 0
    # cost -3.57 %, time +50 %, resources -25 % (mean of cpus -50 %, memory 0 %):
    # cost preference 0.7/0.2/0.1 scores -0.025 + 0.1 - 0.025 = +0.05 -> not acceptable.
    assert r["tradeoff_score"] == pytest.approx(0.7 * (0.27 / 0.28 - 1) + 0.2 * 0.5 + 0.1 * -0.25)
    assert r["tradeoff_acceptable"] is False
    r2 = CALC.compare_configurations(base, opt, baseline_time_s=3600, optimized_time_s=3700,
                                     preference=[0.8, 0.1, 0.1])
    assert r2["tradeoff_acceptable"] is True


def test_compare_uses_summary_times_and_dominance():
    s0 = TrialSummary("a", "completed", Allocation(cpus=2, memory_gb=4), wall_time_s=100.0)
    s1 = TrialSummary("b", "probe", Allocation(cpus=1, memory_gb=4), wall_time_s=10.0,
                      predicted_total_time_s=90.0)
    r = CALC.compare_configurations(s0, s1, preference="time")
    assert r["time_baseline_s"] == 100.0 and r["time_optimized_s"] == 90.0
    assert r["tradeoff_acceptable"] is True  # cheaper and faster: acceptable under any weights
    worse = CALC.compare_configurations(s1, s0, preference="cost")
    assert worse["tradeoff_acceptable"] is False
    no_time = CALC.compare_configurations(Allocation(), Allocation(cpus=2))
    assert no_time["tradeoff_acceptable"] is None and "hourly_cost_change" in no_time


def test_gpu_batch_relationship():
    ok = CALC.validate_gpu_batch_relationship(Allocation(gpus=1, batch_size=64),
                                              Allocation(gpus=2, batch_size=128))
    assert ok["valid"] and ok["per_gpu_batch_new"] == 64
    bad = CALC.validate_gpu_batch_relationship(Allocation(gpus=1, batch_size=64),
                                               Allocation(gpus=4, batch_size=64))
    assert not bad["valid"] and bad["suggested_batch_size"] == 256 and "16" in bad["message"]
    assert CALC.validate_gpu_batch_relationship(Allocation(gpus=0, batch_size=64),
                                                Allocation(gpus=2, batch_size=64))["valid"]


def test_diagnose_zero_gpu_utilization():
    s = TrialSummary("t", "completed", Allocation(gpus=1, cpus=2), gpu_util_mean=0.0,
                     gpu_mem_gb_peak=0.0, cpu_util_mean=97.0, model_info={"uses_gpu": False})
    d = CALC.diagnose_zero_gpu_utilization(s, env={"CUDA_VISIBLE_DEVICES": ""})
    assert d["zero_utilization"]
    text = " ".join(d["issues"])
    assert "CUDA_VISIBLE_DEVICES is empty" in text and "never moves work to CUDA" in text
    assert "nothing was put on the GPU" in text and "CPU-bound" in text
    busy = TrialSummary("t", "completed", Allocation(gpus=1), gpu_util_mean=80.0)
    assert not CALC.diagnose_zero_gpu_utilization(busy)["zero_utilization"]
    idle = TrialSummary("t", "completed", Allocation(gpus=1), gpu_util_mean=0.2,
                        gpu_mem_gb_peak=3.0)
    assert "input pipeline" in CALC.diagnose_zero_gpu_utilization(idle)["issues"][0]
    assert not CALC.diagnose_zero_gpu_utilization(TrialSummary("t", "completed"))["issues"]


def test_negative_price_rejected():
    with pytest.raises(ValueError, match="cost_per_cpu_hour"):
        ResourceCostCalculator(cost_per_cpu_hour=-1)

"""calculate_sla_violations: which SLA metrics a table of measurements meets."""

import pandas as pd
import pytest

from optimizer.foundation.config import SLAConfig
from optimizer.foundation.errors import ConfigError
from optimizer.trials.sla import calculate_sla_violations, row_meets_sla, sla_report


def test_each_metric_judged_against_its_threshold():
    df = pd.DataFrame({"wall_time_s": [100.0, 250.0], "cost": [0.5, 1.5],
                       "throughput": [900.0, 1300.0], "mem_gb_peak": [1.0, 3.0],
                       "cpu_util_mean": [80.0, 60.0], "gpu_util_mean": [None, None]})
    sla = SLAConfig(time_max=200, cost_max=2.0, throughput_min=1000, memory_max=4.0,
                    cpu_util_min=75)
    out = calculate_sla_violations(df, sla)
    # time: max 250 > 200; cost: max 1.5 <= 2; throughput: mean 1100 >= 1000;
    # memory: max 3 <= 4; cpu: mean 70 < 75; gpu: no data, not judged.
    assert out == {"time": False, "cost": True, "throughput": True, "memory": True,
                   "cpu_util": False}


def test_predicted_whole_job_figures_come_first_and_dict_thresholds():
    df = pd.DataFrame({"wall_time_s": [10.0], "predicted_total_time_s": [500.0],
                       "cost": [0.01], "predicted_total_cost": [0.3]})
    out = calculate_sla_violations(df, {"time_max": 400, "cost_max": 1.0})
    assert out == {"time": False, "cost": True}
    assert sla_report(df, {"time_max": 400, "cost_max": 1.0}) == "time VIOLATED, cost ok"
    with pytest.raises(ConfigError, match="time_maxx"):
        calculate_sla_violations(df, {"time_maxx": 1})


def test_gpu_util_only_on_gpu_rows():
    df = pd.DataFrame({"gpus": [0, 1], "gpu_util_mean": [0.0, 70.0]})
    assert calculate_sla_violations(df, {"gpu_util_min": 50}) == {"gpu_util": True}
    assert not row_meets_sla({"gpus": 1, "gpu_util_mean": 10.0}, {"gpu_util_min": 50})


def test_zero_minimums_always_met_and_empty_table():
    df = pd.DataFrame({"throughput": [0.0]})
    assert calculate_sla_violations(df, {"throughput_min": 0}) == {"throughput": True}
    assert calculate_sla_violations(pd.DataFrame(), SLAConfig()) == {}
    assert sla_report(pd.DataFrame(), SLAConfig()) == "no SLA metric could be judged"

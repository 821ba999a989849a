import math

import pytest
from main_command import run_main

from optimizer.foundation.config import (
    MultiObjectiveConfig,
    ResourceConfig,
    SLAConfig,
    load_config,
)
from optimizer.foundation.errors import ConfigError
from optimizer.foundation.forecast import forecast_trend


def write(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_default_config_loads_and_detects_resources():
    cfg = load_config()
    assert cfg.resources.cpu_count_max >= 1
    assert cfg.resources.memory_max > 0
    assert cfg.resources.gpu_count_max >= 0  # no GPU is a normal case
    assert set(cfg.multi_objective.names) == {"cost", "time", "resource", "balanced"}
    assert cfg.multi_objective.num_policies == 4


def test_overrides_apply_and_none_is_ignored():
    cfg = load_config(overrides={"sla": {"time_max": 120, "cost_max": None}})
    assert cfg.sla.time_max == 120.0 and isinstance(cfg.sla.time_max, float)
    assert cfg.sla.cost_max == 10.0


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[resources]\ncpu_count_min = 4\ncpu_count_max = 2\n", "[resources].cpu_count_min"),
        ("[resources]\ncost_per_gpu_hour = -1.0\n", "[resources].cost_per_gpu_hour"),
        ("[sla]\ntime_maxx = 3\n", "unknown key [sla].time_maxx"),
        ("[slaa]\n", "unknown section [slaa]"),
        ("[multi_objective.preference_vectors]\ncost = [0.5, 0.2, 0.1]\n", "must sum to 1"),
        ("[sla]\ntime_max = -5\n", "[sla].time_max"),
        ("[sla\n", "not valid TOML"),
        ("[run]\nagent_episodes = -1\n", "[run].agent_episodes"),
    ],
)
def test_validation_errors_name_key_and_file(tmp_path, text, needle):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert needle in str(exc.value)
    assert str(p) in str(exc.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_gpu_bounds_explicit():
    rc = ResourceConfig(gpu_count_min=0, gpu_count_max=4, cpu_count_max=8, memory_max=64.0)
    assert rc.gpu_count_max == 4
    with pytest.raises(ConfigError, match="gpu_count_min"):
        ResourceConfig(gpu_count_min=3, gpu_count_max=2)


def test_preference_vector_lookup():
    mo = MultiObjectiveConfig()
    assert list(mo.vector("cost")) == [0.7, 0.2, 0.1]
    assert list(mo.vector([0.5, 0.25, 0.25])) == [0.5, 0.25, 0.25]
    with pytest.raises(ConfigError, match="unknown preference 'cheap'"):
        mo.vector("cheap")


def test_forecast_follows_a_trend_not_the_last_value():
    # Times grow by 10 s per run with small noise: the forecast extrapolates the trend.
    times = [100, 111, 119, 131, 140, 149, 161]
    history = [{"wall_time_s": t, "cost": t / 100, "throughput": 1000 / t} for t in times]
    fc = SLAConfig().forecast_sla_values(history)
    assert 165 < fc["time"] < 175
    assert fc["n_runs"] == 7
    assert fc["time"] != times[-1]


def test_forecast_flat_noisy_series_uses_mean():
    mean, se = forecast_trend([10.0, 12.0, 9.0, 11.0, 10.0, 12.0, 9.0, 11.0])
    assert 9.5 < mean < 11.5 and math.isfinite(se)


def test_update_from_baseline_history_sets_limits_with_margin():
    sla = SLAConfig()
    history = [{"time": 100.0, "cost": 1.0, "throughput": 50.0}] * 3
    sla.update_from_baseline_history(history, margin=0.1)
    assert sla.time_max == pytest.approx(110.0)
    assert sla.cost_max == pytest.approx(1.1)
    assert sla.throughput_min == pytest.approx(45.0)


def test_forecast_without_columns_is_a_clear_error():
    with pytest.raises(ConfigError, match="no time, cost or throughput"):
        SLAConfig().forecast_sla_values([{"foo": 1}])


def test_cli_bad_config_exits_2(tmp_path):
    p = write(tmp_path, "[sla]\nbogus = 1\n")
    proc = run_main("--train-file", "examples/train_mlp.py", "--config", str(p))
    assert proc.returncode == 2
    assert "bogus" in proc.stderr and str(p) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_forecast_of_a_falling_positive_series_stays_positive():
    # A straight line through 100, 60, 30, 10 would forecast below zero.
    history = [{"throughput": v} for v in (100.0, 60.0, 30.0, 10.0)]
    fc = SLAConfig().forecast_sla_values(history)
    assert 0 < fc["throughput"] < 10

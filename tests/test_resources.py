"""ResourceManager.apply_configuration: the environment a trial gets, and CPU affinity sets."""

import os
import types

import pytest

from optimizer.foundation import gpu
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import ConfigError
from optimizer.trials.resources import THREAD_VARS, ResourceManager, as_allocation, cpu_affinity_set

PRICES = ResourceConfig(gpu_count_max=4, cpu_count_max=8, memory_max=64.0,
                        cost_per_gpu_hour=2.5, cost_per_cpu_hour=0.04, cost_per_gb_hour=0.005)


def test_zero_gpus_hides_every_device_and_sets_threads():
    env = ResourceManager.apply_configuration(Allocation(gpus=0, cpus=3, batch_size=64),
                                              env={"PATH": "/bin"}, resource_config=PRICES,
                                              visible_devices=[0, 1])
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert all(env[v] == "3" for v in THREAD_VARS)
    assert env["OPTIMIZER_BATCH_SIZE"] == "64"
    assert env["COST_PER_GPU_HOUR"] == "2.5" and env["COST_PER_CPU_HOUR"] == "0.04"
    assert env["COST_PER_GB_HOUR"] == "0.005"
    assert env["PATH"] == "/bin"


def test_one_and_many_gpus_are_chosen_among_visible_devices():
    one = ResourceManager.apply_configuration({"gpu_count": 1, "cpu_count": 2}, env={},
                                              visible_devices=[2, 5, 7])
    assert one["CUDA_VISIBLE_DEVICES"] == "2"
    many = ResourceManager.apply_configuration(Allocation(gpus=3, cpus=2), env={},
                                               visible_devices=[2, 5, 7])
    assert many["CUDA_VISIBLE_DEVICES"] == "2,5,7"
    with pytest.raises(ConfigError, match="4 GPU.*3 visible"):
        ResourceManager.apply_configuration(Allocation(gpus=4), env={}, visible_devices=[2, 5, 7])


def test_visible_devices_default_to_nvml(monkeypatch):
    monkeypatch.setattr(gpu, "nvml_device_count", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    env = ResourceManager.apply_configuration(Allocation(gpus=2), env={})
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    monkeypatch.setattr(gpu, "nvml_device_count", lambda: 0)
    with pytest.raises(ConfigError, match="1 GPU"):
        ResourceManager.apply_configuration(Allocation(gpus=1), env={})


def test_gpu_readings_through_nvml_skip_a_failing_device(monkeypatch):
    class FakeNvml:  # three GPUs; index 1 fails as a GPU that fell off the bus does
        def nvmlDeviceGetHandleByIndex(self, i):
            if i == 1:
                raise RuntimeError("GPU is lost")
            return i

        def nvmlDeviceGetUtilizationRates(self, h):
            return types.SimpleNamespace(gpu=10 * (h + 1))

        def nvmlDeviceGetMemoryInfo(self, h):
            return types.SimpleNamespace(used=(h + 1) * 1024**3)

    monkeypatch.setattr(gpu, "_nvml", FakeNvml)
    monkeypatch.setattr(gpu, "nvml_device_count", lambda: 3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert gpu.gpu_utilization() == [30.0, 10.0]
    assert gpu.gpu_memory_used_gb([0, 1, 2]) == [1.0, 3.0]
    monkeypatch.setattr(gpu, "_nvml", lambda: None)
    assert gpu.gpu_utilization([0]) == [] and gpu.gpu_memory_used_gb() == []


def test_os_environ_untouched_unless_asked(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("OPTIMIZER_BATCH_SIZE", "999")
    env = ResourceManager.apply_configuration(Allocation(cpus=2), visible_devices=[])
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert "OPTIMIZER_BATCH_SIZE" not in env  # None: the script's own default
    assert env["OMP_NUM_THREADS"] == "2"
    ResourceManager.apply_configuration(Allocation(cpus=2, batch_size=16), visible_devices=[],
                                        mutate=True)
    assert os.environ["OMP_NUM_THREADS"] == "2" and os.environ["OPTIMIZER_BATCH_SIZE"] == "16"


def test_prices_from_a_mapping_config():
    env = ResourceManager.apply_configuration(
        {"gpus": 0, "cpus": 1, "cost_per_cpu_hour": 0.1}, env={})
    assert env["COST_PER_CPU_HOUR"] == "0.1" and "COST_PER_GPU_HOUR" not in env


@pytest.mark.parametrize("bad", [{"cpus": 0}, {"gpus": -1}, {"batch_size": 0}, {"cpus": 1.5}])
def test_bad_allocations_are_clear_errors(bad):
    with pytest.raises(ConfigError):
        as_allocation(bad)


def test_cpu_affinity_set():
    assert cpu_affinity_set(2, available=[5, 1, 3]) == [1, 3]
    assert cpu_affinity_set(8, available=[0, 1]) == [0, 1]
    assert len(cpu_affinity_set(1)) == 1
    with pytest.raises(ConfigError):
        cpu_affinity_set(0, available=[0])

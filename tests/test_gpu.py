"""The GPU paths on a real GPU: NVML readings, GPU trials, agents and the CRBM on CUDA.

Skipped without a CUDA device (CI has none); run on a GPU machine with ``pytest tests/test_gpu.py``.
"""

import textwrap

import numpy as np
import pandas as pd
import pytest
import torch

from optimizer.foundation import gpu
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.training import TrainingModuleManager, TrialRequest

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PRICES = ResourceConfig(cpu_count_max=2, memory_max=16.0, gpu_count_max=1)


def test_nvml_reads_the_gpu(monkeypatch):
    assert gpu.nvml_device_count() >= 1
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu.visible_device_indices()[0] == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu.visible_device_indices() == [0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu.visible_device_indices() == []
    (util,), (mem,) = gpu.gpu_utilization([0]), gpu.gpu_memory_used_gb([0])
    assert 0.0 <= util <= 100.0 and mem >= 0.0


def _trial(tmp_path, gpus):
    # Holds ~1 GiB on the GPU and keeps it busy, so NVML must see both memory and utilisation.
    script = tmp_path / "gpu_job.py"
    script.write_text(
        textwrap.dedent("""
        import time, torch
        print("devices", torch.cuda.device_count(), flush=True)
        if torch.cuda.is_available():
            x = torch.randn(16384, 16384, device="cuda")
            t0 = time.time()
            while time.time() - t0 < 2.5:
                y = x @ x
                torch.cuda.synchronize()
        print("total_samples=1", flush=True)
    """)
    )
    mgr = TrainingModuleManager(script)
    trial = tmp_path / "run" / "trials" / f"gpu{gpus}"
    summary = mgr.run_training(TrialRequest(Allocation(gpus=gpus, cpus=1, memory_gb=8.0), trial,
                                            monitor_interval=0.2, timeout_s=120), PRICES)
    return summary, trial


def test_gpu_trial_sees_one_gpu_and_traces_its_use(tmp_path):
    s, trial = _trial(tmp_path, gpus=1)
    assert s.status == "completed", (trial / "stdout.log").read_text()
    assert "devices 1" in (trial / "stdout.log").read_text()
    trace = pd.read_csv(trial / "trace.csv")
    assert {"gpu_util", "gpu_mem_gb"} <= set(trace.columns)
    assert s.gpu_mem_gb_peak > 0.9  # the 1 GiB tensor (plus the CUDA context)
    assert s.gpu_util_mean > 10.0
    assert s.hourly_cost == pytest.approx(
        PRICES.cost_per_gpu_hour + PRICES.cost_per_cpu_hour + 8.0 * PRICES.cost_per_gb_hour
    )


def test_cpu_trial_hides_the_gpu(tmp_path):
    s, trial = _trial(tmp_path, gpus=0)
    assert s.status == "completed"
    assert "devices 0" in (trial / "stdout.log").read_text()
    assert "gpu_util" not in pd.read_csv(trial / "trace.csv").columns
    assert s.gpu_util_mean is None


def test_example_cnn_trains_on_the_gpu(tmp_path, repo_root):
    mgr = TrainingModuleManager(
        repo_root / "examples" / "train_cnn.py", "--epochs 1 --samples 2048 --log-interval 0.2"
    )
    trial = tmp_path / "cnn"
    s = mgr.run_training(TrialRequest(Allocation(gpus=1, cpus=2, memory_gb=8.0, batch_size=128),
                                      trial, monitor_interval=0.2, timeout_s=300), PRICES)
    assert s.status == "completed", (trial / "stdout.log").read_text()
    assert s.samples == 2048 and s.throughput > 0
    assert s.gpu_mem_gb_peak > 0


def test_morl_agent_trains_on_cuda_and_loads_on_cpu(tmp_path):
    from agents.morl import MORLConfig
    from agents.morl_agent import MultiObjectiveRLAgent

    # The replayed actor update (the design's), so the actor trains on the GPU too.
    cfg = MORLConfig(batch_size=32, buffer_size=512, hidden_dim=32, seed=3,
                     actor_update="projection", critic_dropout=None)
    agent = MultiObjectiveRLAgent(6, 9, cfg, device="cuda", action_factors=(3, 3))
    rng = np.random.default_rng(0)
    for _ in range(64):
        agent.add_experience(
            "cost", rng.random(6), int(rng.integers(9)), float(rng.random()), rng.random(6), False
        )
    assert agent.replay_buffers[0].sample(8).states.device.type == "cuda"
    for _ in range(5):
        stats = agent.train("cost")
    assert np.isfinite(stats["critic_loss"])
    decision = agent.select_action(rng.random((4, 6)), "cost", uncertainty=True)
    assert decision.probs.shape == (4, 9) and np.all(decision.uncertainty >= 0)
    agent.save(tmp_path / "morl.pt")
    cpu_agent = MultiObjectiveRLAgent(6, 9, cfg, device="cpu", action_factors=(3, 3))
    cpu_agent.load(tmp_path / "morl.pt")
    states = rng.random((16, 6))
    a_gpu = agent.select_action(states, "cost", evaluate=True, uncertainty=False).action
    a_cpu = cpu_agent.select_action(states, "cost", evaluate=True, uncertainty=False).action
    np.testing.assert_array_equal(a_gpu, a_cpu)


def test_reinforce_trains_on_cuda():
    from agents.reinforce import ReinforceConfig, SimplePolicy

    policy = SimplePolicy(4, 3, ReinforceConfig(seed=0), device="cuda")
    rng = np.random.default_rng(1)
    for _ in range(4):
        states = rng.random((5, 4))
        actions = policy.select_action(states)
        policy.add_experience(
            states, actions, np.ones(5), np.ones(5, dtype=bool), env_id=np.arange(5)
        )
    stats = policy.train()
    assert stats is not None and np.isfinite(stats["policy_loss"])


def test_crbm_on_cuda_fits_as_well_as_on_cpu():
    from phases.detector import PhaseDetector
    from phases.synthetic import make_synthetic_traces

    traces = make_synthetic_traces(8, random_state=2).traces
    errors = {}
    for device in ("cpu", "cuda"):
        model = PhaseDetector(n_phases=4, epochs=60, random_state=0, device=device).fit(traces)
        errors[device] = model.score(traces)  # mean squared reconstruction error
    # Different random streams on the two devices: the same quality, not the same numbers.
    assert errors["cuda"] == pytest.approx(errors["cpu"], rel=0.25)

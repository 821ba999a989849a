"""The workload model fitted on real trials of the bundled example predicts a held-out trial.

Runs examples/train_mlp.py for real through the project's runner (five allocations, one short
run each, seconds per run), fits WorkloadModel on four and predicts the fifth's throughput
within 25%.

Batch sizes stay at or below 256: on 2-core machines the MLP's throughput at one CPU peaks near
batch 256 and falls at 512 (likely the batch falling out of cache), a dip the model's saturating
batch curve does not have, and whose size varies between machines. Fitted across it, the
held-out prediction was off by 36% on the CI machine. Without it, 11 runs on a 2-core machine
erred by -12% to +18% (standard deviation 8%): the fitted points themselves vary by up to +-12%
between runs, so the tolerance is three standard deviations. Model error on exact synthetic
trials is tested tightly in tests/test_env_workload.py (test_fit_recovers_*).
"""

import os

import pytest

from envs import CloudEnvironment, oracle
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.search.calibrate import env_config_from_trials, measure
from optimizer.search.workload_fit import fit_workload_model

pytestmark = pytest.mark.slow

# 12000 samples (about 2 s of training): with 4000 (under 1 s) the repeat-to-repeat spread of
# one allocation was +-11%, with 12000 +-4%.
ARGS = ["--epochs", "1", "--samples", "12000", "--log-interval", "0.2"]
RES = ResourceConfig(
    gpu_count_max=0,
    cpu_count_min=1,
    cpu_count_max=2,
    memory_min=0.5,
    memory_max=4.0,
    memory_step=0.5,
)


@pytest.fixture(scope="module")
def trials(tmp_path_factory, repo_root):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    import psutil

    # Other processes would be measured, not the allocation. (Measured now: the load average
    # still counts the tests that ran before this one, which the suite holds off meanwhile.)
    busy = psutil.cpu_percent(interval=1.0) / 100 * (os.cpu_count() or 1)
    if busy > 1.0:
        pytest.skip(f"other processes keep {busy:.1f} of {os.cpu_count()} CPUs busy")
    allocs = [Allocation(0, c, 2.0, b) for c in (1, 2) for b in (64, 256)]
    allocs.append(Allocation(0, 1, 2.0, 128))  # held out
    return measure(
        repo_root / "examples" / "train_mlp.py",
        allocs,
        tmp_path_factory.mktemp("mlp"),
        train_args=ARGS,
        resource_config=RES,
        timeout_s=120,
        repeats=1,  # one run each: on a machine to itself (CI's) a run varies by +-4% at
        # 12000 samples, and the faster of two cost the suite 20 s
    )


def test_fit_on_real_trials_predicts_held_out_throughput(trials):
    assert all(t.ok and t.throughput for t in trials), [(t.trial_id, t.reason) for t in trials]
    model = fit_workload_model(trials[:4], noise_scale=256, ref_batch=128)
    held = trials[4]
    pred = model.predict_trial(held.allocation)["throughput"]
    err = pred / held.throughput - 1
    assert abs(err) < 0.25, (pred, held.throughput, model.fit_report_.per_point)
    assert model.params.device == "cpu" and model.fit_report_.n_trials == 4


def test_env_from_real_trials_runs_and_has_an_optimum(trials):
    cfg = env_config_from_trials(
        trials, resources=RES, noise_scale=256, ref_batch=128, preference="cost"
    )
    env = CloudEnvironment(cfg)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    best = oracle.optimal_policy(cfg)
    assert best.total_return >= oracle.best_static(cfg).total_return - 1e-9

"""WorkloadModel: presets against published figures, fit recovery, refusal."""

import dataclasses

import numpy as np
import pytest

from envs.workload import (
    PhaseSpec,
    WorkloadModel,
    WorkloadParams,
    list_presets,
    phase_sequence,
)
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.errors import CloudoptError
from optimizer.search.workload_fit import fit_workload_model
from optimizer.trials.records import TrialSummary

# dl-platforms lecture: Table 4 (VGG-16/Caffe, batch 75) and Table 6 (ResNet-50/TF, batch 128)
PUBLISHED = [
    ("vgg16-v100", 75, [2, 4, 8, 16, 28], [106.46, 106.5, 107.24, 107.45, 107.47]),
    ("vgg16-p100", 75, [2, 4, 8], [65.96, 66.14, 65.67]),
    ("resnet50-v100", 128, [16, 28], [345.3, 345.8]),
]


@pytest.mark.parametrize("name,batch,threads,published", PUBLISHED)
def test_presets_reproduce_published_throughput(name, batch, threads, published):
    model = WorkloadModel.from_preset(name)
    pred = model.predict(1, np.array(threads), np.inf, batch)["throughput"]
    np.testing.assert_allclose(pred, published, rtol=0.01)


def test_resnet_gpu_utilisation_matches_table6():
    pred = WorkloadModel.from_preset("resnet50-v100").predict(1, [16, 28], np.inf, 128)
    np.testing.assert_allclose(pred["gpu_util"], [0.933, 0.927], atol=0.01)


def test_all_presets_load_and_behave():
    assert {"resnet50-v100", "resnet50-p100", "vgg16-v100", "vgg16-p100"} <= set(list_presets())
    for name in list_presets():
        m = WorkloadModel.from_preset(name)
        g = 0 if m.params.device == "cpu" else 1
        p = m.predict(g, [1, 2, 4], 1e9, 64)
        assert np.all(np.diff(p["throughput"]) >= -1e-9)  # more threads never slow it down
        assert np.all(p["efficiency"] > 0) and not p["oom"].any()


def test_pollux_form_properties():
    m = WorkloadModel.from_preset("resnet50-v100")
    one, four = (m.predict(g, 32, 1e9, 128 * g)["throughput"] for g in (1, 4))
    assert 3.0 * one < four < 4.0 * one  # sub-linear scaling from the sync term
    assert m.efficiency(64) > 1.0 > m.efficiency(512)
    assert float(m.efficiency(128)) == pytest.approx(1.0)
    assert m.predict(1, 8, 8.0, 128)["oom"]  # host memory: 6 + 0.03 * 128 GB > 8 GB
    assert m.predict(1, 8, 64.0, 256)["oom"]  # GPU memory: local batch 256 on 16 GB


def test_phase_sequence_midpoints():
    phases = [PhaseSpec(0, 0.1), PhaseSpec(1, 0.75), PhaseSpec(2, 0.15)]
    assert phase_sequence(phases, 20).tolist() == [0, 0] + [1] * 15 + [2] * 3


def synthetic_trials(params, grid, noise=0.0, seed=0):
    model = WorkloadModel(params=params)
    rng = np.random.default_rng(seed)
    trials = []
    for i, (g, c, b) in enumerate(grid):
        p = model.predict(g, c, np.inf, b)
        thr = float(p["throughput"]) * float(np.exp(noise * rng.standard_normal()))
        trials.append(
            TrialSummary(
                trial_id=f"t{i}",
                status="completed",
                allocation=Allocation(g, c, 8.0, b),
                throughput=thr,
                mem_gb_peak=float(p["mem_gb"]),
                cpu_util_mean=100 * float(p["cpu_util"]),
                gpu_util_mean=100 * float(p["gpu_util"]) if g else None,
            )
        )
    return trials


def test_fit_recovers_cpu_parameters():
    true = WorkloadParams(
        device="cpu",
        alpha_c=0.004,
        beta_c=0.0002,
        parallel_fraction=0.8,
        mem_base_gb=0.6,
        mem_per_sample_gb=0.002,
    )
    grid = [(0, c, b) for c in (1, 2, 4) for b in (32, 128, 512)]
    model = fit_workload_model(synthetic_trials(true, grid))
    p = model.params
    assert p.device == "cpu"
    for name in ("alpha_c", "beta_c", "parallel_fraction", "mem_base_gb", "mem_per_sample_gb"):
        assert getattr(p, name) == pytest.approx(getattr(true, name), rel=1e-3), name
    rep = model.fit_report_
    assert rep.r2_throughput > 0.9999 and rep.max_rel_error < 1e-4 and rep.dof == 6
    assert len(rep.per_point) == 9


def test_fit_recovers_gpu_parameters():
    true = dataclasses.replace(
        WorkloadModel.from_preset("resnet50-v100").params, noise_scale=0.0, gpu_mem_gb=0.0
    )
    grid = [(g, c, 64 * g * k) for g in (1, 2, 4) for c in (2, 8, 24) for k in (1, 2)]
    model = fit_workload_model(synthetic_trials(true, grid), ref_batch=128)
    p = model.params
    for name in (
        "alpha_c",
        "beta_c",
        "alpha_r",
        "beta_r",
        "gamma",
        "delta",
        "parallel_fraction",
        "host_cores_per_gpu",
        "gpu_util_max",
    ):
        assert getattr(p, name) == pytest.approx(getattr(true, name), rel=0.02, abs=1e-4), name
    assert model.fit_report_.r2_throughput > 0.9999


def test_fit_with_noise_reports_error():
    true = WorkloadParams(device="cpu", alpha_c=0.004, beta_c=0.0002, parallel_fraction=0.8)
    grid = [(0, c, b) for c in (1, 2, 4) for b in (32, 128, 512)]
    model = fit_workload_model(synthetic_trials(true, grid, noise=0.05, seed=1))
    rep = model.fit_report_
    assert 0.0 < rep.max_rel_error < 0.2 and 0.8 < rep.r2_throughput < 1.0
    assert model.params.parallel_fraction == pytest.approx(0.8, abs=0.15)


# The cnn script's 2-core figures (issue 39): per-sample time flat on 1 CPU, 2 CPUs faster at
# batch 64 and up and slower at 16. Amdahl alone makes 2 CPUs faster at every batch.
SYNCED = WorkloadParams(device="cpu", alpha_c=0.0, beta_c=0.001, parallel_fraction=0.9,
                        sync_c=0.012)


def test_more_threads_can_slow_small_steps():
    model = WorkloadModel(params=SYNCED)
    thr = {(c, b): float(model.predict(0, c, np.inf, b)["throughput"])
           for c in (1, 2) for b in (16, 256)}
    assert thr[(2, 16)] < thr[(1, 16)] and thr[(2, 256)] > thr[(1, 256)]
    amdahl = WorkloadModel(params=dataclasses.replace(SYNCED, sync_c=0.0))
    assert float(amdahl.predict(0, 2, np.inf, 16)["throughput"]) > thr[(1, 16)]


def test_fit_frees_the_threads_sync_only_where_amdahl_misses():
    grid = [(0, c, b) for c in (1, 2) for b in (16, 32, 64, 128)]
    model = fit_workload_model(synthetic_trials(SYNCED, grid, noise=0.03, seed=2))
    assert "sync_c" in model.fit_report_.free
    assert model.params.sync_c == pytest.approx(SYNCED.sync_c, rel=0.3)
    pred = {c: float(model.predict(0, c, np.inf, 16)["throughput"]) for c in (1, 2)}
    assert pred[2] < pred[1]  # the decision Amdahl alone gets wrong
    assert model.fit_report_.max_rel_error < 0.1
    # Where Amdahl holds, the noise alone does not free it, and the report says why.
    plain = WorkloadParams(device="cpu", alpha_c=0.004, beta_c=0.0002, parallel_fraction=0.8)
    model = fit_workload_model(synthetic_trials(plain, grid, noise=0.06, seed=2))
    assert model.params.sync_c == 0.0 and "halve" in model.fit_report_.fixed["sync_c"]
    exact = fit_workload_model(synthetic_trials(plain, grid))
    assert exact.params.sync_c == 0.0 and "within 3%" in exact.fit_report_.fixed["sync_c"]
    # Four trials would fit four parameters exactly: one more is needed.
    four = fit_workload_model(synthetic_trials(SYNCED, [(0, c, b) for c in (1, 2)
                                                        for b in (16, 128)]))
    assert four.params.sync_c == 0.0 and "one more trial" in four.fit_report_.fixed["sync_c"]
    # One batch per CPU count cannot tell a thread's cost from the step's work.
    few = fit_workload_model(synthetic_trials(SYNCED, [(0, 1, 16), (0, 1, 128), (0, 2, 16),
                                                      (0, 4, 128)]))
    assert few.params.sync_c == 0.0 and "each of two CPU counts" in few.fit_report_.fixed["sync_c"]
    held = fit_workload_model(synthetic_trials(SYNCED, grid), fixed={"sync_c": 0.012})
    assert held.params.sync_c == 0.012 and held.fit_report_.fixed["sync_c"] == "given"


def test_fit_refuses_unidentifiable_trials():
    true = WorkloadParams(device="cpu", alpha_c=0.004, beta_c=0.0002, parallel_fraction=0.8)
    # One batch size: fitted without the batch dimension (all time per sample), not refused.
    one = fit_workload_model(synthetic_trials(true, [(0, c, 64) for c in (1, 2, 4)]))
    assert "same per-device batch size 64" in one.fit_report_.fixed["alpha_c"]
    assert one.params.alpha_c == 0.0 and one.fit_report_.max_rel_error < 1e-6
    with pytest.raises(CloudoptError, match="CPU"):
        fit_workload_model(synthetic_trials(true, [(0, 2, b) for b in (32, 64, 128)]))
    with pytest.raises(CloudoptError, match="usable trial"):
        fit_workload_model(synthetic_trials(true, [(0, 1, 32), (0, 2, 64)]))
    failed = synthetic_trials(true, [(0, 1, 32), (0, 2, 64), (0, 2, 32)])
    failed[0].status = "failed"
    with pytest.raises(CloudoptError, match="2 usable trial"):
        fit_workload_model(failed)
    mixed = synthetic_trials(true, [(0, 1, 32), (0, 2, 64), (0, 2, 32)])
    mixed[0].allocation.gpus = 1
    with pytest.raises(CloudoptError, match="mix CPU-only and GPU"):
        fit_workload_model(mixed)


def test_single_gpu_fit_is_limited_to_the_measured_gpu_count():
    true = dataclasses.replace(WorkloadModel.from_preset("vgg16-v100").params, noise_scale=0.0)
    grid = [(1, c, b) for c in (2, 8) for b in (32, 64)]
    model = fit_workload_model(synthetic_trials(true, grid))
    assert "alpha_r" in model.fit_report_.fixed
    assert model.meta["fitted_gpu_range"] == [1, 1]
    # VGG-16 is GPU-bound from two threads on: the input pipeline cannot be identified, so the
    # fit drops it and says why instead of inventing one
    assert "delta" in model.fit_report_.fixed and model.params.delta == 0.0
    assert model.fit_report_.max_rel_error < 0.01
    from envs import CloudEnvironment, EnvConfig
    from optimizer.foundation.config import ResourceConfig

    res = ResourceConfig(gpu_count_max=4, cpu_count_max=8, memory_max=32.0, memory_step=8.0)
    env = CloudEnvironment(EnvConfig(workload=model, batch_sizes=(32, 64), resources=res))
    assert env.model.grid.gpus.tolist() == [1]  # 2-4 GPUs were never measured
    with pytest.raises(CloudoptError, match="runs on GPUs"):
        CloudEnvironment(EnvConfig(workload=model, resources=ResourceConfig(gpu_count_max=0)))


def test_three_gpu_trials_fit_the_gpu_step_time_without_the_input_pipeline():
    # As on the H200 (benchmarks/README.md, "GPU machine"): the CPU-only baseline trial of a
    # script that needs CUDA crashed, leaving three for four parameters. The GPU's step time
    # is fitted, CPU threads are taken not to matter, and the reason is reported.
    true = dataclasses.replace(WorkloadModel.from_preset("vgg16-v100").params, noise_scale=0.0)
    trials = synthetic_trials(true, [(1, 16, 128), (1, 8, 128), (1, 16, 256)], noise=0.03)
    model = fit_workload_model(trials)
    rep = model.fit_report_
    assert rep.free == ["alpha_c", "beta_c"] and model.params.delta == 0.0
    assert "3 trials cannot identify the input pipeline" in rep.fixed["parallel_fraction"]
    assert rep.max_rel_error < 0.1
    with pytest.raises(CloudoptError, match="2 usable trial|2 trial"):
        fit_workload_model(trials[:1] + trials[2:])


def test_env_config_from_trials_and_preset_round_trip(tmp_path):
    from envs import CloudEnvironment, oracle
    from optimizer.foundation.config import ResourceConfig
    from optimizer.search.calibrate import env_config_from_trials, preset_text

    true = WorkloadParams(
        device="cpu",
        alpha_c=0.004,
        beta_c=0.0002,
        parallel_fraction=0.8,
        mem_base_gb=0.6,
        mem_per_sample_gb=0.002,
    )
    trials = synthetic_trials(true, [(0, c, b) for c in (1, 2, 4) for b in (32, 128, 512)])
    for t in trials:
        t.total_samples, t.samples, t.wall_time_s = 1e5, 5e3, 5e3 / t.throughput + 0.2
    res = ResourceConfig(gpu_count_max=0, cpu_count_max=4, memory_max=4.0, memory_step=0.5)
    cfg = env_config_from_trials(trials, resources=res, noise_scale=256, ref_batch=128)
    env = CloudEnvironment(cfg)
    assert env.resolved.restart_s == pytest.approx(0.2)
    # the measured 32..512 and one power of two beyond each end, where plans get measured
    assert env.model.grid.batch_size.tolist() == [16, 32, 64, 128, 256, 512, 1024]
    assert oracle.optimal_policy(cfg).total_return > oracle.noop_return(cfg)
    model = cfg.workload
    text = preset_text(
        model,
        trials,
        name="synthetic",
        command="test",
        job=model.meta["job"],
        grid=model.meta["grid"],
        resources={"cpu_count_max": 4},
        sla={"time_max": 99.0},
    )
    path = tmp_path / "synthetic.toml"
    path.write_text(text)
    loaded = WorkloadModel.from_preset(path)
    assert loaded.params.beta_c == pytest.approx(true.beta_c, rel=1e-3)
    assert loaded.meta["job"]["total_samples"] == 1e5 and loaded.meta["sla"]["time_max"] == 99.0


def test_fit_holds_given_parameters():
    true = WorkloadParams(device="cpu", alpha_c=0.004, beta_c=0.0002, parallel_fraction=0.8)
    trials = synthetic_trials(true, [(0, 1, b) for b in (32, 128, 512)])
    model = fit_workload_model(trials, fixed={"parallel_fraction": 0.5})
    assert model.params.parallel_fraction == 0.5
    assert model.params.beta_c == pytest.approx(true.beta_c, rel=1e-3)
    assert model.fit_report_.fixed["parallel_fraction"] == "given"
    with pytest.raises(CloudoptError, match="cannot hold 'mem_base_gb' fixed"):
        fit_workload_model(trials, fixed={"mem_base_gb": 1.0})
    with pytest.raises(CloudoptError, match="outside"):
        fit_workload_model(trials, fixed={"parallel_fraction": 1.5})


def test_calibrate_cli_fits_a_recorded_run_into_a_preset(tmp_path):
    from envs import CloudEnvironment
    from optimizer.search.calibrate import main

    true = WorkloadParams(
        device="cpu",
        alpha_c=0.004,
        beta_c=0.0002,
        parallel_fraction=0.8,
        mem_base_gb=0.6,
        mem_per_sample_gb=0.002,
    )
    trials = synthetic_trials(true, [(0, c, b) for c in (1, 2) for b in (32, 128, 512)] * 2)
    for i, t in enumerate(trials):
        t.trial_id = f"t{i:02d}"
        t.total_samples, t.samples, t.wall_time_s = 1e5, 5e3, 5e3 / t.throughput + 1.0
        if i >= 6:
            t.throughput *= 0.5  # a slowed-down repeat: the faster one must be kept
        t.save(tmp_path / "run" / "trials" / t.trial_id)
    out = tmp_path / "fitted.toml"
    argv = [
        "train.py",
        "--name",
        "fitted",
        "--cpus",
        "1,2",
        "--batch",
        "32,128,512",
        "--from-run",
        str(tmp_path / "run"),
        "--out",
        str(out),
        "--noise-scale",
        "100",
    ]
    assert main(argv) == 0
    model = WorkloadModel.from_preset(out)
    assert model.params.parallel_fraction == pytest.approx(0.8, rel=1e-3)
    assert "Trials (allocation: measured -> fitted" in out.read_text()
    env = CloudEnvironment(workload=str(out))
    assert env.resolved.restart_s == pytest.approx(1.0)
    assert env.model.grid.cpus.tolist() == [1, 2]


def test_fit_refuses_trials_where_more_cpus_ran_slower():
    true = WorkloadParams(device="cpu", alpha_c=0.004, beta_c=0.0002, parallel_fraction=0.8)
    trials = synthetic_trials(true, [(0, c, b) for c in (1, 2) for b in (32, 512)])
    trials[2].throughput = 0.1 * trials[0].throughput  # 2 CPUs at batch 32: ten times slower
    with pytest.raises(CloudoptError, match="oversubscribed"):
        fit_workload_model(trials)


def test_a_refusal_on_sub_millisecond_steps_names_the_threads_overhead_too():
    # steps of about 0.4 ms: a tiny model on which a second thread can truly cost more than
    # it adds, so the machine is not the only suspect
    true = WorkloadParams(device="cpu", alpha_c=0.0002, beta_c=0.000006, parallel_fraction=0.5)
    trials = synthetic_trials(true, [(0, c, b) for c in (1, 2) for b in (32, 512)])
    trials[2].throughput = 0.4 * trials[0].throughput
    with pytest.raises(CloudoptError, match=r"steps took 0\.\d+ ms .*synchronisation"):
        fit_workload_model(trials)


def test_measure_runs_repeats_round_robin_and_keeps_the_fastest(tmp_path, monkeypatch, repo_root):
    from optimizer.search import calibrate
    from optimizer.trials.training import TrainingModuleManager

    calls = []
    speeds = {("a", 0): 10.0, ("a", 1): 30.0, ("b", 0): 20.0, ("b", 1): 5.0}

    def fake_run(self, request, resource_config):
        alloc, trial_dir = request.allocation, request.trial_dir
        name = "a" if alloc.cpus == 1 else "b"
        calls.append((name, trial_dir.name))
        thr = speeds[(name, len([c for c in calls if c[0] == name]) - 1)]
        return TrialSummary(trial_dir.name, "completed", alloc, throughput=thr)

    monkeypatch.setattr(TrainingModuleManager, "run_training", fake_run)
    allocs = [Allocation(0, 1, 2.0, 64), Allocation(0, 2, 2.0, 64)]
    best = calibrate.measure(repo_root / "examples" / "train_mlp.py", allocs, tmp_path, repeats=2)
    # a burst of load then slows one repeat of each allocation, not every repeat of one
    assert [c[0] for c in calls] == ["a", "b", "a", "b"]
    assert [c[1].split("-")[0] + c[1][-3:] for c in calls] == ["00-r0", "01-r0", "00-r1", "01-r1"]
    assert [t.throughput for t in best] == [30.0, 20.0]

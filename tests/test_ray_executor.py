"""Trials on Ray (``--executor ray``): same records as local ones, side by side on distinct
cores, lost workers and impossible requests as failed trials, resume after an interrupted run.

Skipped when Ray is not installed (``pip install 'cloudopt[ray]'``; CI installs it).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.search.baseline import run_baseline  # noqa: E402
from optimizer.trials.executors import LocalExecutor, make_executor  # noqa: E402
from optimizer.trials.records import TrialSummary  # noqa: E402
from optimizer.trials.training import TrainingModuleManager  # noqa: E402

TINY = Path(__file__).parent / "data" / "tiny_train.py"
KILLER = """
import os, signal, time
if os.environ.get("OPTIMIZER_BATCH_SIZE") == "13":
    time.sleep(0.5)
    os.kill(os.getppid(), signal.SIGKILL)  # the Ray worker running this trial dies
    time.sleep(30)
exec(open(TINY_TRAIN).read())
"""


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False,
             object_store_memory=100 * 2**20)
    yield
    ray.shutdown()


def _records(run_dir: Path) -> dict[str, dict]:
    out = {}
    for d in sorted((run_dir / "trials").iterdir()):
        s = TrialSummary.load(d).to_dict()
        files = sorted(p.name for p in d.iterdir())
        out[d.name] = {"files": files, **s}
    return out


def test_parallel_trials_record_what_sequential_ones_do(tmp_path, config, local_ray):
    manager = TrainingModuleManager(TINY, "--samples 3000")
    allocs = [Allocation(cpus=1, memory_gb=1.0, batch_size=b) for b in (32, 64, 128)]
    seq = run_baseline(manager, allocs, tmp_path / "seq", config, probe_seconds=None,
                       quiet=True, executor=LocalExecutor())
    executor = make_executor("ray")
    par = run_baseline(manager, allocs, tmp_path / "par", config, probe_seconds=None,
                       quiet=True, executor=executor)
    executor.close()  # joined an existing Ray: leaves it running
    assert ray.is_initialized()
    a, b = _records(tmp_path / "seq"), _records(tmp_path / "par")
    assert list(a) == list(b)  # same trial folders, in the same order
    for name in a:
        x, y = a[name], b[name]
        assert x["files"] == y["files"]
        for key in ("status", "reason", "allocation", "samples", "total_samples",
                    "throughput_source", "model_info", "train_file", "train_args"):
            assert x[key] == y[key], (name, key)
        assert y["throughput"] == pytest.approx(x["throughput"], rel=0.25)
        assert x["executor"] == "local" and y["executor"] == "ray"
    assert [t.trial_id for t in seq] == [t.trial_id for t in par]
    # The driver sees the trials as its own: a resume reuses them.
    for t in par:
        assert manager.recorded_trial(tmp_path / "par" / "trials" / t.trial_id) is not None
    csv = (tmp_path / "par" / "trials.csv").read_text()
    assert csv.count("\n") == 4


def test_two_one_cpu_trials_run_side_by_side_on_their_own_cores(tmp_path, config, local_ray):
    manager = TrainingModuleManager(TINY, "--samples 4000")
    allocs = [Allocation(cpus=1, memory_gb=1.0, batch_size=b) for b in (64, 128)]
    executor = make_executor("ray")
    trials = run_baseline(manager, allocs, tmp_path / "run", config, quiet=True,
                          executor=executor)
    assert all(t.ok for t in trials)
    first, second = trials
    assert first.concurrent_with == [second.trial_id]
    assert second.concurrent_with == [first.trial_id]
    cores = [json.loads((tmp_path / "run" / "trials" / t.trial_id / "config.json").read_text())
             ["cpu_affinity"] for t in trials]
    assert cores[0] != cores[1] and all(len(c) == 1 for c in cores)
    # they overlapped: each started before the other ended (a sum of walls against the
    # whole call's time counts Ray's dispatch, as long as these half-second trials)
    assert first.started_at < second.finished_at and second.started_at < first.finished_at
    # The record on disk says so too (rewritten when the second trial ended).
    on_disk = TrialSummary.load(tmp_path / "run" / "trials" / first.trial_id)
    assert on_disk.concurrent_with == [second.trial_id]


def test_a_killed_worker_is_a_failed_trial_and_the_others_go_on(tmp_path, config, local_ray):
    script = tmp_path / "killer.py"
    script.write_text(f"TINY_TRAIN = {str(TINY)!r}\n" + KILLER)
    manager = TrainingModuleManager(script, "--samples 2000")
    allocs = [Allocation(cpus=1, memory_gb=1.0, batch_size=13),
              Allocation(cpus=1, memory_gb=1.0, batch_size=64)]
    trials = run_baseline(manager, allocs, tmp_path / "run", config, quiet=True,
                          executor=make_executor("ray"))
    killed, fine = trials
    assert killed.status == "failed" and killed.reason == "worker-lost"
    assert killed.stderr_tail  # Ray's message, for the report
    assert fine.ok and fine.throughput
    assert (tmp_path / "run" / "trials" / killed.trial_id / "summary.json").exists()
    # A resume measures it again (the loss was the executor's), keeping the old record.
    assert manager.recorded_trial(tmp_path / "run" / "trials" / killed.trial_id) is None
    assert (tmp_path / "run" / "replaced" / killed.trial_id / "summary.json").exists()
    assert "lost with its Ray worker" in manager.replaced[-1]
    # The script of the dead worker did not outlive it (parent-death signal).
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(script) not in ps
    # The next trial on the node removes the dead worker's temporary folder (the folders of
    # the dead found now: another test's worker may die meanwhile, and is not this one's)
    import tempfile

    import psutil

    from optimizer.trials.executors.ray_executor import TRIAL_PREFIX

    orphans = [d for d in Path(tempfile.gettempdir()).glob(f"{TRIAL_PREFIX}*-*")
               if not psutil.pid_exists(int(d.name[len(TRIAL_PREFIX):].split("-", 1)[0]))]
    assert orphans
    run_baseline(TrainingModuleManager(TINY, "--samples 500"),
                 [Allocation(cpus=1, memory_gb=1.0, batch_size=64)], tmp_path / "after",
                 config, quiet=True, executor=make_executor("ray"))
    assert not [d for d in orphans if d.exists()]


def test_an_allocation_no_node_can_hold_fails_instead_of_waiting(tmp_path, config, local_ray):
    manager = TrainingModuleManager(TINY, "--samples 1000")
    trials = run_baseline(manager, [Allocation(cpus=3, memory_gb=1.0, batch_size=64)],
                          tmp_path / "run", config, quiet=True, executor=make_executor("ray"))
    assert trials[0].status == "failed" and trials[0].reason == "infeasible"
    assert "no Ray node has 3 CPU(s)" in trials[0].stderr_tail


def test_resume_after_an_interrupted_ray_run(tmp_path, repo_root):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "optimizer", "--train-file", str(TINY), "--preference", "cost",
            "--train-args", "--samples 6000", "--baseline-samples", "3", "--probe-seconds", "0",
            "--agent-seconds", "0.5", "--live-plan", "off", "--refine-rounds", "0", "--runoff-rounds",
            "1", "--budget", "5", "--executor", "ray", "--output",
            str(out), "--quiet"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own
    proc = subprocess.Popen(args, cwd=repo_root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob("trials/*/summary.json")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, its local Ray and its trials
    proc.wait()
    first = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("trials/*/summary.json")}
    assert first, "no trial finished before the interruption"
    again = subprocess.run([sys.executable, "-m", "optimizer", "--resume", str(out), "--quiet"],
                           cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "trials reused from the run folder" in again.stdout
    for name, stamp in first.items():  # finished trials are not run again
        assert (out / "trials" / name / "summary.json").stat().st_mtime_ns == stamp
    trials = [TrialSummary.load(d) for d in sorted((out / "trials").iterdir())]
    assert len([t for t in trials if t.trial_id[:2].isdigit()]) == 3
    assert all(t.executor == "ray" for t in trials)
    assert json.loads((out / "run.json").read_text())["options"]["executor"] == "ray"
    assert (out / "report.html").exists()


def test_map_runs_functions_side_by_side_and_keeps_their_order(local_ray):
    executor = make_executor("ray")
    pids = executor.map([lambda: (1, os.getpid()), lambda: (2, os.getpid())])
    assert [n for n, _ in pids] == [1, 2]
    assert all(pid != os.getpid() for _, pid in pids)  # ran in Ray workers
    assert LocalExecutor().map([lambda: 3, lambda: 4]) == [3, 4]


def test_the_probe_sees_inside_a_silent_script_on_a_ray_worker(tmp_path, config, local_ray):
    """Issue 38 under ``--executor ray``: a torch script that prints nothing gets its rate and
    its job's size from the in-process probe on the worker, and its events come back."""
    import textwrap

    from test_in_process_probe import QUIET_LOOP

    from optimizer.trials.executors import TrialRequest

    script = tmp_path / "silent.py"
    script.write_text(textwrap.dedent(QUIET_LOOP))
    manager = TrainingModuleManager(script, [], batch_size_arg="--bs")
    assert manager.in_process_probe
    trial_dir = tmp_path / "run" / "trials" / "00-ray"
    request = TrialRequest(Allocation(cpus=1, memory_gb=2.0, batch_size=64), trial_dir,
                           probe_seconds=4.0, timeout_s=60,
                           monitor_interval=config.run.monitor_interval)
    executor = make_executor("ray")
    ((_, s),) = list(executor.run(manager, [request], config.resources))
    executor.close()
    assert s.executor == "ray" and s.status == "probe"
    assert s.throughput_source == "probe" and s.throughput > 0
    assert s.total_samples == 2048 * 5000 and s.job_size_source == "probe: dataset x epochs"
    assert s.probe["samples_per_step"] == 64
    assert (trial_dir / "probe.jsonl").exists() and (trial_dir / "stages.csv").exists()


PHASED = """
import time
import torch
end = time.time() + 1.5
while time.time() < end:  # start-up: one thread of pure Python
    sum(range(2000))
model = torch.nn.Linear(64, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 64), torch.randint(0, 4, (128,))
end = time.time() + 1.5
while time.time() < end:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_a_live_trial_runs_on_a_ray_worker_and_brings_back_its_changes(tmp_path, local_ray):
    """Issue 40: the live plan's trials run on Ray as they do locally; the controller works
    on the worker and its log comes back with the trial's files."""
    from optimizer.foundation.config import ResourceConfig
    from optimizer.trials.executors import TrialRequest
    from optimizer.trials.live import read_changes
    from optimizer.trials.live.controller import PlanDecider
    from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry
    from optimizer.trials.live.session import LiveSetup

    script = tmp_path / "phased.py"
    script.write_text(PHASED)
    plan = LivePlan(phases={"startup": PhaseEntry(PhaseAllocation(1, None)),
                            "train": PhaseEntry(PhaseAllocation(2, None))},
                    fallback=PhaseAllocation(2, 1.0), interval_s=0.2, source="test")
    live = LiveSetup(PlanDecider(plan), interval_s=0.2, pause_s=1.0, label="live plan")
    req = TrialRequest(Allocation(cpus=2, memory_gb=1.0), tmp_path / "run" / "trials" / "live",
                       timeout_s=120, live=live)
    [(index, summary)] = list(make_executor("ray").run(TrainingModuleManager(script), [req],
                                                       ResourceConfig()))
    assert index == 0 and summary.status == "completed", summary.reason
    assert summary.executor == "ray" and summary.live["decider"] == "live plan"
    assert {"startup", "train"} <= set(summary.live["phases_seen"])
    changes = read_changes(req.trial_dir)
    assert [len(c.cpus) for c in changes if c.phase == "startup" and c.cpus] == [1]
    assert any(c.phase == "train" and c.cpus and len(c.cpus) == 2 for c in changes)


def test_run_plan_on_ray_runs_the_job_under_its_plan_and_brings_back_the_log(tmp_path,
                                                                             local_ray):
    """Issue 40: ``run --plan --executor ray`` runs the wrapper as one Ray task sized to the
    plan's largest phase; the job moves between its stages' cores there, its exit status comes
    back, and so does the log."""
    from optimizer.commands.run_plan import _run_on_ray
    from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry

    script = tmp_path / "phased.py"
    script.write_text(PHASED + "\nimport sys\nsys.exit(3)\n")
    plan = LivePlan(phases={"startup": PhaseEntry(PhaseAllocation(1, 0.5)),
                            "train": PhaseEntry(PhaseAllocation(2, 1.0))},
                    fallback=PhaseAllocation(2, 1.0), interval_s=0.2,
                    schedule=["startup", "train"], memory_max_gb=1.0)
    assert plan.largest() == PhaseAllocation(2, 1.0)
    logs = tmp_path / "logs"
    options = {"interval": 0.2, "pause_s": 1.0, "config": None, "kubernetes": "off",
               "quiet": True}
    code = _run_on_ray([sys.executable, str(script)], plan, logs, options, None)
    assert code == 3
    summary = json.loads((logs / "live-summary.json").read_text())
    assert summary["exit_code"] == 3 and summary["phases_seen"].get("startup")
    changes = [json.loads(line) for line in (logs / "changes.jsonl").read_text().splitlines()]
    assert any(c["phase"] == "train" and c["cpus"] and len(c["cpus"]) == 2 for c in changes)
    assert summary["cpu_seconds"] < 2 * summary["wall_time_s"]  # start-up held one core

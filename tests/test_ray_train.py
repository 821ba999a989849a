"""Data-parallel trials as Ray Train jobs (``--executor ray``, a torchrun script, replicas > 1):
two nodes of one CPU each (``ray.cluster_utils.Cluster`` on this machine), one rank on each.

The ranks' samples add up to what the script counted over all ranks, each rank's node is
recorded, the other rank's probe events lie in the trial folder; no script outlives its trial.
Which rank a failure names is tested on the driver's reading of the ranks' results (a rank
killed mid-run on a cluster was checked by hand: one failed trial naming rank 1; on one
machine, under torchrun, ``tests/test_torchrun.py`` kills a rank for real).

The cluster tests are skipped when Ray is not installed (``pip install 'cloudopt[ray]'``);
the driver's reading of the ranks' results is tested without it.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import need

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import read_json
from optimizer.reports.cluster import JobShape, write_cluster_outputs
from optimizer.trials.executors.base import TrialRequest
from optimizer.trials.executors.ray_train import rank_failure, train_error, worker_resources
from optimizer.trials.records import TrialSummary
from optimizer.trials.training import TrainingModuleManager


@pytest.fixture(scope="module")
def ray_module():
    """Ray, or the test skipped (failed in CI, which installs the ``ray`` extra)."""
    return need("ray", "pip install -e '.[ray]'")


needs_ray = pytest.mark.usefixtures("ray_module")
ROOT = Path(__file__).resolve().parent.parent
DDP = ROOT / "examples" / "train_ddp.py"
NODE = {"num_cpus": 1, "object_store_memory": 100 * 2**20}


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, connect=False,
                head_node_args={**NODE, "include_dashboard": False})
    c.add_node(**NODE)
    c.wait_for_nodes()
    yield c
    if ray.is_initialized():  # a failed test left its connection open
        ray.shutdown()
    c.shutdown()


def _running(trial_id: str) -> list[psutil.Process]:
    """The processes of trial ``trial_id`` (others' runs of the same script are not ours)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("OPTIMIZER_TRIAL_ID") == trial_id:
                found.append(p)
        except psutil.Error:
            continue
    return found


def _nothing_left(trial_id: str, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while _running(trial_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _running(trial_id)


def _run_one(cluster, script: Path, args: str, trial_dir: Path, config) -> TrialSummary:
    manager = TrainingModuleManager(script, args)
    manager.launcher = "torchrun"
    request = TrialRequest(Allocation(cpus=2, memory_gb=2.0, replicas=2), trial_dir,
                           timeout_s=60, monitor_interval=0.2)
    from optimizer.trials.executors.ray_executor import RayExecutor

    executor = RayExecutor(address=cluster.address)
    try:
        [(_, summary)] = list(executor.run(manager, [request], config.resources))
    finally:
        executor.close()
    return summary


@needs_ray
def test_ranks_on_two_nodes_add_up_to_the_job(cluster, tmp_path, config):
    d = tmp_path / "run" / "trials" / "ray-train-ddp"
    t = _run_one(cluster, DDP, "--samples 2048 --epochs 1 --hidden 128", d, config)
    assert t.status == "completed", t.stderr_tail
    assert t.executor == "ray" and t.allocation.replicas == 2 and t.allocation.cpus == 2
    printed = re.search(r"global samples trained: (\d+)", (d / "stdout.log").read_text())
    assert printed, (d / "stdout.log").read_text()
    assert t.samples == pytest.approx(int(printed.group(1)), rel=0.05)
    ranks = t.model_info["ray_ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert len({r["node_id"] for r in ranks}) == 2  # one rank on each node
    # each rank's own peak kept (the TrainJob sizes a node from it), summing to the job's
    peaks = t.model_info["rank_mem_gb_peak"]
    assert len(peaks) == 2 and all(p > 0 for p in peaks)
    assert sum(peaks) == pytest.approx(t.mem_gb_peak)
    names = {p.name for p in d.iterdir()}
    assert {"probe.jsonl", "probe.rank1.jsonl", "trace.csv", "trace.rank1.csv",
            "summary.json"} <= names
    cfg = read_json(d / "config.json")
    assert cfg["allocation"]["replicas"] == 2 and cfg["rank_allocation"]["cpus"] == 1
    assert TrialSummary.load(d).samples == t.samples
    assert (tmp_path / "run" / "trials.csv").exists()
    assert _nothing_left(d.name)


@needs_ray
def test_the_ray_train_job_written_for_a_ddp_pick_runs_to_its_end(cluster, tmp_path):
    """``ray_train_job.py``, as the outputs write it for the DDP example's pick (2 workers),
    run on its own against a local two-node cluster: each worker runs its rank of the
    unmodified script, and the ranks train together (rank 0 prints the all-reduced count)."""
    shape = JobShape(Allocation(cpus=2, memory_gb=1.0, batch_size=64, replicas=2),
                     {"OMP_NUM_THREADS": "1"}, name="20261128-130501-train_ddp",
                     script=str(DDP), launcher="torchrun",
                     args=["--samples", "1024", "--epochs", "1", "--hidden", "64"],
                     memory_bounds_gb=(0.5, 1.0), cpu_bounds=(1.0, 2))
    path = write_cluster_outputs(tmp_path, shape)["ray_train_job"]
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    proc = subprocess.run([sys.executable, str(path)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ray_train_job: 2 workers of" in proc.stdout
    printed = re.search(r"global samples trained: (\d+)", proc.stdout + proc.stderr)
    assert printed and int(printed.group(1)) >= 1024, proc.stdout[-3000:]


def test_ray_train_is_reached_through_public_api_only():
    """No ``ray.*._internal`` import anywhere in the Ray code or what it writes."""
    sources = [ROOT / "optimizer/trials/executors/ray_train.py",
               ROOT / "optimizer/trials/executors/ray_executor.py",
               ROOT / "optimizer/reports/cluster/ray_job.py"]
    for source in sources:
        assert "_internal" not in source.read_text(), source


def _rank(rank, status, code=None, finished="", **extra):
    summary = TrialSummary(f"r{rank}", status, exit_code=code, finished_at=finished,
                           reason="" if status != "failed" else "crash",
                           stderr_tail="Traceback\nRuntimeError: gloo reset" if code else "")
    return {"rank": rank, "node_ip": "10.0.0.7", "ok": summary.ok,
            "files": {"summary.json": json.dumps(summary.to_dict()).encode()}, **extra}


def test_the_rank_blamed_is_the_one_that_died_first_not_its_peers():
    # rank 1 killed by a signal; rank 0 crashed on the broken process group after it
    ranks = {0: _rank(0, "failed", 1, "t2"), 1: _rank(1, "failed", -9, "t1")}
    reason, line, rank = rank_failure(ranks, 2)
    assert rank == 1 and reason == "crash (rank 1 of 2 was killed by signal 9 (SIGKILL))"
    assert line == "rank 1 of 2 on Ray node 10.0.0.7 failed: RuntimeError: gloo reset"
    # a rank stopped after its peer failed is never the cause
    ranks = {0: _rank(0, "failed", -15, "t0", stopped=True), 1: _rank(1, "failed", 1, "t1")}
    assert rank_failure(ranks, 2)[2] == 1
    # a probe stopped at its time box breaks its peers: not a failure
    assert rank_failure({0: _rank(0, "probe"), 1: _rank(1, "failed", 1)}, 2) is None
    assert rank_failure({0: _rank(0, "completed", 0), 1: _rank(1, "completed", 0)}, 2) is None
    reason, line, rank = rank_failure({0: _rank(0, "completed", 0)}, 2)
    assert (reason, rank) == ("worker-lost", 1) and "rank 1 of 2" in line
    error = {"rank": 1, "ok": False, "error": "CloudoptError: no free core"}
    assert rank_failure({0: _rank(0, "failed", 1), 1: error}, 2)[:1] == ("executor-error",)


def test_ray_train_errors_and_infeasible_jobs_are_named():
    class ActorDiedError(Exception):
        pass

    class WorkerGroupError(Exception):
        worker_failures = {1: ActorDiedError("node gone")}

    assert train_error(WorkerGroupError("Training failed"))[0] == "worker-lost"
    reason, line = train_error(RuntimeError("controller\nbroke"))
    assert reason == "executor-error" and line.endswith("(RuntimeError: broke)")
    nodes = [{"CPU": 1.0, "memory": 2.0 * 2**30}, {"CPU": 1.0, "memory": 1.0 * 2**30}]
    per, _ = worker_resources(Allocation(cpus=2, memory_gb=4.0, replicas=2), nodes)
    assert per == {"CPU": 1.0, "memory": 2 * 2**30}
    per, why = worker_resources(Allocation(cpus=4, replicas=2), nodes)
    assert per is None and "hold 0 of the 2 workers of 2 CPU(s)" in why

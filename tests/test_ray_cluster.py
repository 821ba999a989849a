"""Trials on an existing Ray cluster (``--executor ray --ray-address ADDR``): two nodes of one
CPU each (``ray.cluster_utils.Cluster`` on this machine), joined by address as the README says.

The script's folder is shipped with the job (Ray refuses a local folder in a task's own
``runtime_env``), trials land on both nodes and their files come back into the run folder; a
node removed or a worker killed mid-trial is one failed trial with one clear line, measured
again by a resumed run; Ray's memory kill is reported as an allocation too small.

Skipped when Ray is not installed (``pip install 'cloudopt[ray]'``; CI installs it).
"""

import threading
import time
from pathlib import Path

import pytest
from conftest import need

ray = need("ray", "pip install -e '.[ray]'")

from ray.cluster_utils import Cluster  # noqa: E402

from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.foundation.atomic_files import read_json  # noqa: E402
from optimizer.search.baseline import run_baseline  # noqa: E402
from optimizer.trials.executors import make_executor  # noqa: E402
from optimizer.trials.executors.ray_executor import lost_reason, shipped_folder  # noqa: E402
from optimizer.trials.failures import explain_unusable  # noqa: E402
from optimizer.trials.records import TrialSummary  # noqa: E402
from optimizer.trials.training import TrainingModuleManager  # noqa: E402

TINY = Path(__file__).parent / "data" / "tiny_train.py"
NODE = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
# By its batch size a trial kills its Ray worker (14) or, once started, waits for the test's
# go-ahead (13, 15), so that it is surely running when its node is removed.
SCRIPT = """
import os, signal, sys, time
from pathlib import Path

here = Path(__file__).resolve().parent
batch = int(os.environ.get("OPTIMIZER_BATCH_SIZE") or 64)
marks = Path((here / "marks.txt").read_text().strip())
(marks / f"started-{batch}").write_text(str(os.getpid()))
print(f"script_dir={here} data={(here / 'data.txt').read_text().strip()} "
      f"runs_shipped={(here / 'runs').exists()} big_shipped={(here / 'big.bin').exists()}",
      flush=True)
if batch == 14:
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(30)
if batch in (13, 15):
    deadline = time.monotonic() + 40
    while not (marks / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
exec(compile((here / "tiny_train.py").read_text(), "tiny_train.py", "exec"))
"""


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, connect=False,
                head_node_args={**NODE, "include_dashboard": False})
    c.add_node(**NODE)
    c.wait_for_nodes()
    yield c
    if ray.is_initialized():  # a failed test left its connection open
        ray.shutdown()
    c.shutdown()


@pytest.fixture
def job(tmp_path):
    """The script's folder, as a user has it: a data file it reads, earlier runs and a file
    too large to ship beside it; and where its trials leave their marks."""
    folder, marks = tmp_path / "job", tmp_path / "marks"
    folder.mkdir()
    marks.mkdir()
    (folder / "train.py").write_text(SCRIPT)
    (folder / "tiny_train.py").write_text(TINY.read_text())
    (folder / "data.txt").write_text("shipped\n")
    (folder / "marks.txt").write_text(str(marks))
    (folder / "runs").mkdir()
    (folder / "runs" / "old.txt").write_text("an earlier run")
    with open(folder / "big.bin", "wb") as f:  # sparse: large on paper, instant to make
        f.truncate(65 * 2**20)
    return folder / "train.py", marks


def _node_ids(cluster) -> set[str]:
    return {cluster.head_node.node_id} | {n.node_id for n in cluster.worker_nodes}


def _script_run(trial_config: dict) -> Path:
    return Path(next(a for a in trial_config["worker_command"] if a.endswith(".py")))


def _baseline(cluster, script, batches, run_dir, config):
    manager = TrainingModuleManager(script, "--samples 1500")
    executor = make_executor("ray", cluster.address)
    try:
        allocs = [Allocation(cpus=1, memory_gb=1.0, batch_size=b) for b in batches]
        return manager, run_baseline(manager, allocs, run_dir, config, quiet=True,
                                     executor=executor)
    finally:
        executor.close()


def test_trials_land_on_both_nodes_and_their_files_come_back(cluster, job, tmp_path, config):
    script, _ = job
    run_dir = tmp_path / "run"
    manager, trials = _baseline(cluster, script, (32, 64), run_dir, config)
    assert not ray.is_initialized()  # the executor's connection, closed with it
    assert all(t.ok and t.throughput and t.executor == "ray" for t in trials)
    nodes = []
    for t in trials:
        d = run_dir / "trials" / t.trial_id
        assert {"config.json", "summary.json", "stdout.log", "trace.csv"} <= {
            p.name for p in d.iterdir()}
        cfg = read_json(d / "config.json")
        nodes.append(cfg["ray_node_id"])
        assert cfg["train_file"] == str(script)  # as the driver sees it: --resume reuses it
        ran = _script_run(cfg)
        assert ran.name == "train.py" and ran != script  # it ran the copy Ray unpacked
        assert manager.recorded_trial(d) is not None
        out = (d / "stdout.log").read_text()
        assert "data=shipped" in out  # the folder came with the script,
        assert "runs_shipped=False big_shipped=False" in out  # less earlier runs and big files
    assert set(nodes) == _node_ids(cluster)  # one trial on each node, side by side
    assert (run_dir / "trials.csv").read_text().count("\n") == 3


def test_a_script_in_another_folder_is_shipped_with_a_new_connection(
        cluster, job, tmp_path, config):
    first, _ = job
    other = tmp_path / "other"
    other.mkdir()
    for name in ("train.py", "tiny_train.py", "marks.txt"):
        (other / name).write_text((first.parent / name).read_text())
    (other / "data.txt").write_text("the other folder\n")
    executor = make_executor("ray", cluster.address)  # one executor for both, as the CLI has
    try:
        for script in (first, other / "train.py"):
            run_baseline(TrainingModuleManager(script, "--samples 500"),
                         [Allocation(cpus=1, memory_gb=1.0, batch_size=64)],
                         tmp_path / script.parent.name / "run", config, quiet=True,
                         executor=executor)
    finally:
        executor.close()
    trials = [tmp_path / name / "run" / "trials" / "00-g0-c1-m1-b64" for name in ("job", "other")]
    outs = [(d / "stdout.log").read_text() for d in trials]
    assert "data=shipped" in outs[0] and "data=the other folder" in outs[1]
    for d, script in zip(trials, (first, other / "train.py"), strict=True):
        ran = _script_run(read_json(d / "config.json"))
        assert ran.name == "train.py" and ran != script  # a copy its node unpacked


def test_a_worker_killed_mid_trial_is_one_failed_trial_with_one_clear_line(
        cluster, job, tmp_path, config):
    script, _ = job
    _, (killed, fine) = _baseline(cluster, script, (14, 64), tmp_path / "run", config)
    assert killed.status == "failed" and killed.reason == "worker-lost"
    assert killed.stderr_tail.splitlines()[0] == (
        "the Ray worker running the trial died, killed or crashed (WorkerCrashedError); "
        "--resume measures it again")
    assert fine.ok and fine.throughput
    (line,) = explain_unusable([killed, fine], None, 60)  # as the report says it
    assert line.startswith(f"1 of 2 trials ({killed.trial_id}) lost with the Ray worker")


def test_a_node_removed_mid_trial_fails_and_a_resumed_run_measures_it_again(
        cluster, job, tmp_path, config):
    script, marks = job
    run_dir = tmp_path / "run"
    removed = []

    def remove_the_worker_node_once_both_run():
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(list(marks.glob("started-*"))) < 2:
            time.sleep(0.05)
        node = next(iter(cluster.worker_nodes))
        cluster.remove_node(node)
        removed.append(node.node_id)
        (marks / "go").touch()  # the trial on the head node goes on

    remover = threading.Thread(target=remove_the_worker_node_once_both_run)
    remover.start()
    try:
        _, trials = _baseline(cluster, script, (13, 15), run_dir, config)
    finally:
        remover.join()
        cluster.add_node(**NODE)  # two nodes again, for the resumed run and the next tests
        cluster.wait_for_nodes()
    assert removed
    lost = [t for t in trials if not t.ok]
    assert len(lost) == 1 and lost[0].reason == "worker-lost", [t.to_dict() for t in trials]
    assert lost[0].stderr_tail.splitlines()[0] == (
        "the Ray node running the trial died or left the cluster (NodeDiedError); "
        "--resume measures it again")
    assert removed[0] in lost[0].stderr_tail  # Ray's message names the node
    survivor = next(t for t in trials if t.ok)
    stamp = (run_dir / "trials" / survivor.trial_id / "summary.json").stat().st_mtime_ns
    manager, again = _baseline(cluster, script, (13, 15), run_dir, config)
    assert all(t.ok for t in again)
    assert (run_dir / "trials" / survivor.trial_id / "summary.json").stat().st_mtime_ns == stamp
    assert [m for m in manager.replaced if "lost with its Ray worker" in m]
    assert (run_dir / "replaced" / lost[0].trial_id / "summary.json").exists()


def test_ray_memory_kill_is_an_allocation_too_small_and_losses_are_one_line_each():
    errors = ray.exceptions
    oom = errors.OutOfMemoryError(
        "Task was killed due to the node running low on memory.\nMemory on the node (IP: "
        "10.0.0.2, ID: abc) where the task was running was 7.22GB / 7.60GB (0.95)...")
    reason, line = lost_reason(oom)
    assert reason == "oom" and "\n" not in line and "out of memory" in line
    t = TrialSummary(trial_id="00-g0-c1-m1-b64", status="failed", reason=reason,
                     allocation=Allocation(cpus=1, memory_gb=1.0, batch_size=64))
    (why,) = explain_unusable([t], None, 60)
    assert "killed at the 1 GB memory limit" in why and "--memory-max" in why
    for exc, expected in ((errors.NodeDiedError("node gone"), "worker-lost"),
                          (errors.WorkerCrashedError(), "worker-lost"),
                          (errors.RuntimeEnvSetupError("no space"), "executor-error")):
        reason, line = lost_reason(exc)
        assert reason == expected and "\n" not in line and type(exc).__name__ in line


def test_what_is_shipped_leaves_runs_caches_and_large_files_behind(job, tmp_path):
    script, _ = job
    folder = script.parent
    (folder / "runs-here").mkdir()
    env = shipped_folder(folder, [folder / "runs-here", tmp_path / "elsewhere"])
    assert env["working_dir"] == str(folder)
    excludes = env["excludes"]
    assert {"runs/", ".git/", ".venv/", "__pycache__/"} <= set(excludes)
    assert "/runs-here/" in excludes and "/big.bin" in excludes
    assert not any("elsewhere" in e or "data.txt" in e for e in excludes)

"""The live actuators (issue 40, part 1): a CPU change reaches every thread of the running job
and its intra-op threads within one interval; a memory change never kills a job whose use fits;
every change is logged with its cause and phase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from optimizer.foundation.memory import right_size_memory
from optimizer.trials.live import LiveTrial, read_changes, set_tree_affinity, tree_tasks
from optimizer.trials.live.memory_rules import HEADROOM
from optimizer.trials.probe import probe_environment, read_probe

JOB = textwrap.dedent("""
    import threading, time
    import torch
    torch.set_num_threads(2)
    stop = time.time() + 20
    def spin():  # a helper thread started before any change, as a data pipeline's would be
        while time.time() < stop:
            time.sleep(0.01)
    threading.Thread(target=spin, daemon=True).start()
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 64)
    print("started", flush=True)
    while time.time() < stop:
        opt.zero_grad(); model(x).pow(2).mean().backward(); opt.step()
        time.sleep(0.005)
""")

needs_two_cores = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and two cores")


def _wait_for(predicate, timeout=10.0, every=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every)
    return False


@needs_two_cores
def test_a_live_cpu_change_reaches_every_thread_and_the_jobs_thread_count(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    events, control = tmp_path / "probe.jsonl", tmp_path / "control.json"
    env = probe_environment(dict(os.environ, OMP_NUM_THREADS="2"), events, control)
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        cores = sorted(os.sched_getaffinity(0))
        live = LiveTrial(proc.pid, tmp_path, control_file=control)
        change = live.set_cpus([cores[0]], cause="phase 1 needs one core", phase=1)
        assert change.tasks >= 2 and not change.skipped  # the main thread and the helper
        assert all(os.sched_getaffinity(tid) == {cores[0]} for tid in tree_tasks(proc.pid))
        # the probe applies it from the training thread at its next check (every 0.5 s)
        assert _wait_for(lambda: any(ev.get("e") == "control" for ev in _events(events)),
                         timeout=3.0)
        order = [ev for ev in _events(events) if ev.get("e") == "control"][-1]
        assert order["num_threads"] == 1 and order["seq"] == 1
        live.set_cpus(cores[:2], cause="back to two", phase=2)
        assert all(os.sched_getaffinity(tid) == set(cores[:2]) for tid in tree_tasks(proc.pid))
        assert _wait_for(lambda: [ev.get("num_threads") for ev in _events(events)
                                  if ev.get("e") == "control"][-1:] == [2], timeout=3.0)
    finally:
        proc.kill()
        proc.wait()
    logged = read_changes(tmp_path)
    assert [(c.cause, c.phase, c.cpus, c.num_threads) for c in logged] == [
        ("phase 1 needs one core", 1, [cores[0]], 1), ("back to two", 2, cores[:2], 2)]
    assert read_probe(events).steps > 0  # the job trained throughout


def _events(path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def test_a_memory_change_never_goes_below_what_the_job_holds(tmp_path):
    """A lower limit stops at the job's resident memory with headroom (now, and the monitor's
    recent samples); a higher one applies at once; a job without a limit never gets one."""
    monitor = SimpleNamespace(memory_limit_gb=4.0, rows=[])
    live = LiveTrial(os.getpid(), tmp_path, monitor=monitor)  # this process: tens of MB
    held = live.resident_gb()
    change = live.set_memory_limit(0.001, cause="phase 0 needs little", phase=0)
    # Lowered, but only to what the job holds with headroom, never to what was asked.
    assert held * HEADROOM * 0.8 <= monitor.memory_limit_gb < 4.0 and change.skipped
    assert change.memory_limit_gb == monitor.memory_limit_gb
    live.set_memory_limit(2.0, cause="phase 1", phase=1)
    assert monitor.memory_limit_gb == 2.0  # a raise applies at once
    # One recent sample above what the job holds now (the dip is now): it still counts.
    monitor.rows = [{"time_s": live.now(), "mem_gb": 1.0}]
    live.set_memory_limit(0.5, cause="phase 0 again", phase=0)
    assert monitor.memory_limit_gb == pytest.approx(right_size_memory(1.0))
    monitor.rows = [{"time_s": live.now(), "mem_gb": 1.9}]
    kept = live.set_memory_limit(0.5, cause="phase 0 again", phase=0)
    assert kept.skipped and monitor.memory_limit_gb == pytest.approx(right_size_memory(1.0))
    assert live.set_memory_limit(0.5, cause="asked again", phase=0) is None  # said once
    assert [c.memory_limit_gb for c in read_changes(tmp_path)][-1] == pytest.approx(
        right_size_memory(1.0))

    unlimited = SimpleNamespace(memory_limit_gb=None, rows=[])
    free = LiveTrial(os.getpid(), tmp_path / "free", monitor=unlimited)
    said = free.set_memory_limit(2.0, cause="phase 1", phase=1)
    assert unlimited.memory_limit_gb is None and "none is introduced" in said.skipped[0]
    assert free.set_memory_limit(0.1, cause="phase 0", phase=0) is None
    assert unlimited.memory_limit_gb is None


def test_a_tree_that_ended_is_no_error(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert tree_tasks(proc.pid) == [] and set_tree_affinity(proc.pid, [0]) == (0, [])
    (tmp_path / "changes.jsonl").write_text('{"t": 1.0, "cause": "x"}\n{"t": 2.0, "ca')
    assert [c.t for c in read_changes(tmp_path)] == [1.0]  # a cut last line is skipped

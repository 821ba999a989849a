"""``python -m optimizer run --plan RUN -- COMMAND`` (issue 40): the job runs under the plan,
its output and exit status pass through, and every change is logged beside a bill."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry

JOB = textwrap.dedent("""
    import sys, time
    import torch
    end = time.time() + 1.0
    while time.time() < end:  # start-up: one thread of Python
        sum(range(1000))
    model = torch.nn.Linear(32, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 32)
    end = time.time() + 1.5
    while time.time() < end:
        opt.zero_grad(); model(x).pow(2).mean().backward(); opt.step()
    print("done training", flush=True)
    sys.exit(int(sys.argv[1]))
""")


def _plan(tmp_path):
    plan = LivePlan(phases={"startup": PhaseEntry(PhaseAllocation(1, 0.5)),
                            "train": PhaseEntry(PhaseAllocation(2, 1.0))},
                    fallback=PhaseAllocation(2, 1.0), interval_s=0.2,
                    schedule=["startup", "train"], memory_max_gb=1.0)
    plan.save(tmp_path)
    return tmp_path


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_a_job_runs_under_its_plan_and_keeps_its_exit_status(tmp_path):
    run_dir = _plan(tmp_path / "run")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    logs = tmp_path / "logs"
    proc = subprocess.run([sys.executable, "-m", "optimizer", "run", "--plan", str(run_dir),
                           "--log-dir", str(logs), "--", sys.executable, str(script), "3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "done training" in proc.stdout  # the job's own output, untouched
    assert "changes over" in proc.stderr
    changes = [json.loads(line) for line in (logs / "changes.jsonl").read_text().splitlines()]
    cpu = [(c["phase"], len(c["cpus"])) for c in changes if c["cpus"]]
    assert cpu[0] == ("train", 2), cpu  # it started at start-up's single core
    summary = json.loads((logs / "live-summary.json").read_text())
    assert summary["exit_code"] == 3 and summary["phases_seen"].get("startup")
    assert summary["cpu_seconds"] < 2 * summary["wall_time_s"]  # start-up held one core


def test_run_plan_refuses_a_missing_plan_or_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "optimizer", "run", "--plan",
                           str(tmp_path), "--", "true"], capture_output=True, text=True)
    assert proc.returncode == 2 and "no live plan here" in proc.stderr
    _plan(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "optimizer", "run", "--plan", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "give the job's command after --" in proc.stderr

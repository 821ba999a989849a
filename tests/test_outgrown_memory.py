"""A job that outgrows its memory (issue 42, part 2): it runs again only with more memory, and a
job killed at the largest limit ends in one line with the figures and the fix, exit 2; the
main job over scripts that crash, hang, print nothing, grow or do no work never shows a
traceback."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.search.choice import recommended_allocation
from optimizer.trials.oom_retry import memory_growth, next_memory, outgrew_message
from optimizer.trials.records import TrialSummary

# Grows to about ``GROW_MB`` MB of resident memory in ``GROW_S`` s, printing a rate, then ends.
GROWING = textwrap.dedent("""
    import os, sys, time
    target, seconds = int(os.environ.get("GROW_MB", "400")), float(os.environ.get("GROW_S", "2"))
    hold, t0, n = [], time.time(), 0
    while len(hold) * 20 < target:
        hold.append(bytearray(20 * 1024 * 1024))
        for i in range(0, len(hold[-1]), 4096):
            hold[-1][i] = 1
        n += 32
        time.sleep(seconds * 20 / target)
        print(f"{n / (time.time() - t0):.1f} samples/s", flush=True)
    time.sleep(0.5)
""")


def _oom(tid: str, limit: float, peak: float, wall: float = 4.0) -> TrialSummary:
    return TrialSummary(tid, "failed", Allocation(0, 1, limit, 64), reason="oom",
                        exit_code=-9, wall_time_s=wall, mem_gb_peak=peak)


def _trace(folder: Path, rate_gb_s: float, seconds: float = 4.0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["exec_id,time_s,cpu_cores,mem_gb"] + [
        f"t,{t / 2:.1f},1.0,{0.1 + rate_gb_s * t / 2:.3f}" for t in range(int(2 * seconds) + 1)]
    (folder / "trace.csv").write_text("\n".join(rows) + "\n")
    return folder


def test_the_next_limit_follows_the_measured_growth_or_bumps_by_1_2(tmp_path):
    steep = _trace(tmp_path / "steep", rate_gb_s=0.5)
    assert memory_growth(steep) == pytest.approx(0.5, rel=0.02)
    # 2 GB + 0.5 GB/s for as long again as it ran (4 s) = 4 GB, rounded up to its step
    assert next_memory(_oom("a", 2.0, 2.05), steep, memory_max=16.0) == pytest.approx(4.0)
    flat = _trace(tmp_path / "flat", rate_gb_s=0.0)
    # no growth: VPA's bump, 2.4 GB rounded up to its 128 MiB step
    assert next_memory(_oom("b", 2.0, 2.05), flat, memory_max=16.0) == 2.5
    assert next_memory(_oom("c", 2.0, 2.05), steep, memory_max=3.0) == 3.0  # never past the max
    assert next_memory(_oom("d", 3.0, 3.05), steep, memory_max=3.0) is None  # at the max already
    assert next_memory(_oom("e", 2.0, 2.05), tmp_path / "none", memory_max=16.0) == 2.5


def test_the_message_names_the_figures_and_the_fix(tmp_path):
    line = outgrew_message("job.py", [_oom("a", 2.0, 2.1), _oom("b", 4.0, 4.2, wall=9.0)], 4.0,
                           tmp_path)
    assert "\n" not in line
    for part in ("reached 4.20 GB after 9 s", "killed at 4 GB", "memory_max = 4 GB",
                 "limits tried: 2, 4 GB", "--memory-max", f"--resume {tmp_path}"):
        assert part in line


def test_a_kill_a_larger_run_explains_does_not_bump_the_request():
    setting = Allocation(0, 1, 2.0, 64)
    killed = _oom("whole-m2", 2.0, 2.05)
    done = TrialSummary("whole-m4", "completed", Allocation(0, 1, 4.0, 64), wall_time_s=9.0,
                        samples=900.0, throughput=100.0, mem_gb_peak=3.0)
    sized = recommended_allocation(done, [killed, done], batch_settable=True)
    assert sized.memory_gb == pytest.approx(3.5)  # 3 GB × 1.15 = 3.45 → 3.5, no 1.2 bump
    unexplained = recommended_allocation(done, [_oom("x", 3.5, 3.5), done], True)
    assert unexplained.memory_gb > 3.5 * 1.15 * 1.2 - 0.01
    assert setting.memory_gb == 2.0


def test_the_whole_run_is_retried_with_more_memory_never_the_same(tmp_path, monkeypatch):
    """In process: the first limit is small (0.25 GB) and the job grows to about 0.4 GB; the
    whole run is killed once, then measured under the grown limit, and the job completes."""
    from optimizer.foundation.config import load_config
    from optimizer.pipeline import CloudResourceOptimizer, Job
    from optimizer.search import trial_port

    script = tmp_path / "grow.py"
    script.write_text(GROWING)
    monkeypatch.setenv("GROW_MB", "400")
    monkeypatch.setenv("GROW_S", "2")
    monkeypatch.setattr(trial_port, "memory_for", lambda cpus, resources: 0.25)
    cfg = load_config(None, {"resources": {"memory_max": 2.0, "cpu_count_max": 1},
                             "run": {"baseline_samples": 1, "refine_rounds": 0,
                                     "runoff_rounds": 0, "monitor_interval": 0.2,
                                     "probe_seconds": 1.0}})
    opt = CloudResourceOptimizer(cfg, quiet=True)
    result = opt.optimize_training(script, tmp_path / "run", Job(script, agent_seconds=2))
    wholes = sorted((tmp_path / "run" / "trials").glob("whole-*"))
    summaries = [TrialSummary.load(d) for d in wholes]
    limits = sorted(s.allocation.memory_gb for s in summaries)
    assert len(summaries) == 2 and limits[0] == 0.25 and limits[1] > 0.25
    killed = next(s for s in summaries if s.allocation.memory_gb == 0.25)
    grown = next(s for s in summaries if s.allocation.memory_gb > 0.25)
    assert killed.reason == "oom" and grown.status == "completed"
    assert result.recommendation.allocation.memory_gb >= grown.mem_gb_peak


SCRIPTS = {
    "crash": "import sys\nprint('loading', flush=True)\nraise SystemExit('bad config: lr')\n",
    "hang": "import time\ntime.sleep(600)\n",
    "silent": "import time\nx = sum(i * i for i in range(10**6))\ntime.sleep(3)\n",
    "no_work": "print('nothing to do')\n",
    "grow": GROWING,
    "traceback": "def f():\n    raise ValueError('shape mismatch')\nf()\n",
}


EXPECTED = {"crash": "bad config: lr", "hang": "printed no throughput within the 1 s probe",
            "silent": "printed no throughput", "no_work": "",
            "grow": "outgrew every memory limit", "traceback": "ValueError: shape mismatch"}
# no_work ran to its end under every setting: a whole run is one job, compared by its wall
# time and cost, so it gets a recommendation (issue: never exit 2 for a job that ran whole).


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_no_traceback_reaches_the_user(kind, tmp_path, repo_root):
    script = tmp_path / f"{kind}.py"
    script.write_text(SCRIPTS[kind])
    config = tmp_path / "small.toml"
    config.write_text("[resources]\nmemory_min = 0.1\nmemory_max = 0.25\ncpu_count_max = 1\n"
                      "[run]\ntrial_timeout_s = 8.0\nmonitor_interval = 0.2\n")
    proc = run_main(
        "--train-file", str(script), "--config", str(config), "--baseline-samples", "1",
        "--probe-seconds", "1", "--agent-seconds", "0.5", "--live-plan", "off",
        "--refine-rounds", "0", "--runoff-rounds", "0", "--output", str(tmp_path / "r"),
        "--quiet", cwd=repo_root, env={"GROW_MB": "400", "GROW_S": "1"})
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, said[-2000:]
    assert proc.returncode in (0, 2), said[-2000:]
    if kind == "grow":
        assert proc.returncode == 2 and "outgrew every memory limit" in proc.stderr
        assert "--memory-max" in proc.stderr and "--resume" in proc.stderr
    if proc.returncode == 2:
        assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("error")]) == 1
    assert EXPECTED[kind] in proc.stderr, proc.stderr[-2000:]
    if kind == "no_work":
        assert proc.returncode == 0 and "recommend" in proc.stdout, said[-2000:]

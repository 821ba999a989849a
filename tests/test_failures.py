"""When no trial is usable, the error says why, once per cause, with the fix."""


from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.trials.failures import explain_unusable
from optimizer.trials.records import TrialSummary


def _t(tid, status, reason="", **kw):
    return TrialSummary(tid, status, Allocation(0, 1, 1.5, 32), reason=reason, **kw)


def test_one_line_per_cause_with_the_fix():
    trials = [_t("a", "probe"), _t("b", "probe"), _t("c", "probe"),
              _t("d", "failed", "oom", mem_gb_peak=1.55),
              _t("e", "failed", "crash", exit_code=1,
                 stderr_tail="Traceback...\n  File x\nValueError: bad shape\n"),
              _t("ok", "completed", throughput=10.0)]
    lines = explain_unusable(trials, probe_seconds=5, timeout_s=600)
    assert len(lines) == 3
    assert lines[0].startswith("3 of 6 trials (a, b, c) printed no throughput within the 5 s "
                               "probe: use --probe-seconds 15")
    assert "1 of 6 trials (d) killed at the 1.5 GB memory limit, peak 1.55 GB" in lines[1]
    assert "crashed (exit code 1)" in lines[2] and "ValueError: bad shape" in lines[2]


def test_main_job_names_the_cause(tmp_path, repo_root):
    script = tmp_path / "silent.py"
    script.write_text("import time\ntime.sleep(30)\n")
    proc = run_main("--train-file", str(script), "--baseline-samples", "2", "--probe-seconds",
                    "1", "--total-samples", "100", "--output", str(tmp_path / "r"), "--quiet",
                    cwd=repo_root)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "2 of 2 trials" in proc.stderr and "use --probe-seconds 3" in proc.stderr

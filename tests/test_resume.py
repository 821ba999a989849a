"""``--resume DIR`` alone finishes a run; a changed preference replans and keeps the trials."""

import json

import pytest
from main_command import run_main

from optimizer.foundation.atomic_files import to_json
from optimizer.foundation.result import RunResult

TINY_ARGS = ["--train-args", "--samples 4000", "--baseline-samples", "3", "--probe-seconds",
             "0", "--agent-seconds", "0.5", "--live-plan", "off", "--refine-rounds", "1",
             "--runoff-rounds", "1", "--budget", "4"]


def cli(repo_root, *args):
    return run_main(*args, cwd=repo_root)


def _stamps(out):
    return {p: p.stat().st_mtime_ns for p in out.glob("trials/*/summary.json")}


def test_resume_alone_then_with_another_preference(tmp_path, repo_root):
    out = tmp_path / "run"
    first = cli(repo_root, "--train-file", "tests/data/tiny_train.py", "--preference", "cost",
                *TINY_ARGS, "--output", str(out), "--quiet")
    assert first.returncode == 0, first.stderr[-3000:]
    stamps = _stamps(out)
    body = json.loads((out / "recommendation.json").read_text())
    result = RunResult.from_json(body)  # the file is the typed result, written and read back
    assert json.loads(to_json(result.to_json())) == body and result.preference == "cost"

    again = cli(repo_root, "--resume", str(out), "--quiet")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming {out} with its recorded options" in again.stdout
    assert f"{out}: its last recommendation: " in again.stdout
    assert "measured now: none" in again.stdout
    assert _stamps(out) == stamps  # nothing was run again
    assert json.loads((out / "run.json").read_text())["options"]["live_plan"] == "off"
    assert json.loads((out / "recommendation.json").read_text())["preference"] == "cost"

    looped = sorted(p.parent.name for p in out.glob("trials/*/summary.json")
                    if not p.parent.name[:2].isdigit())
    timed = cli(repo_root, "--resume", str(out), "--preference", "time", "--quiet")
    assert timed.returncode == 0, timed.stderr[-3000:]
    assert "changed preference: cost -> time" in timed.stdout
    assert "planning again, changed since the recorded plan: preference cost -> time" \
        in timed.stdout
    baseline = {p: t for p, t in stamps.items() if p.parent.name[:2].isdigit()}
    assert all(p.stat().st_mtime_ns == t for p, t in baseline.items())  # probes reused
    assert looped  # the cost run's own trials compete for the time run's choice
    assert "in the running for the final choice: " + ", ".join(looped) in timed.stdout
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["preference"] == "time"
    plan = json.loads((out / "rl" / "recommendation.json").read_text())
    assert plan["inputs"]["preference"] == "time"


def test_resume_of_a_folder_that_is_not_a_run(tmp_path, repo_root):
    proc = cli(repo_root, "--resume", str(tmp_path))
    assert proc.returncode == 2 and "no run.json there" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_train_file_or_resume_is_required(repo_root):
    proc = cli(repo_root, "--preference", "cost")
    assert proc.returncode == 2
    assert "--train-file FILE is required (or --resume DIR" in proc.stderr


@pytest.mark.parametrize("given, expected", [(None, "balanced"), ("time", "time")])
def test_recorded_options_fill_what_is_not_given(tmp_path, given, expected):
    from optimizer.commands.optimize import build_parser
    from optimizer.commands.resume import fill_from_run
    from optimizer.foundation.job import Job

    (tmp_path / "run.json").write_text(json.dumps({
        "train_file": "examples/train_mlp.py",
        "options": {"train_file": ["examples/train_mlp.py"], "preference": "balanced",
                    "baseline_samples": 6, "train_args": "--epochs 1",
                    "history": ["runs/last-week"], "history_job": "mlp"}}))
    argv = ["--resume", str(tmp_path)] + (["--preference", given] if given else [])
    args = build_parser("t").parse_args(argv)
    changed = fill_from_run(args)
    assert args.preference == expected and args.baseline_samples == 6
    assert args.train_args == "--epochs 1" and args.train_file == ["examples/train_mlp.py"]
    assert changed == ([] if given is None else ["preference: balanced -> time"])
    job = Job.from_options(vars(args), args.train_file[0])  # --history comes back too
    assert job.history == ("runs/last-week",) and job.history_job == "mlp"


def test_changed_script_is_measured_again_and_the_old_record_kept(tmp_path, repo_root):
    script = tmp_path / "tiny.py"
    script.write_text((repo_root / "tests" / "data" / "tiny_train.py").read_text())
    out = tmp_path / "run"
    args = ["--train-file", str(script), "--preference", "cost", *TINY_ARGS, "--refine-rounds",
            "0", "--quiet"]
    first = cli(repo_root, *args, "--output", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    probes = sorted(p.name for p in out.glob("trials/0*"))
    script.write_text(script.read_text() + "\n# tuned\n")
    again = cli(repo_root, "--resume", str(out), "--quiet")
    assert again.returncode == 0, again.stderr[-3000:]
    replaced = {p.name for p in (out / "replaced").iterdir()}  # probes and the loop's trial
    assert set(probes) < replaced
    assert again.stdout.count("the script changed since it was measured") == len(replaced)
    assert all((out / "trials" / p / "summary.json").exists() for p in probes)

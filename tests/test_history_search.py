"""A search from history (``--history``): earlier runs of the script fitted as prior
measurements, real runs only where the history is silent, the leader confirmed for real."""

import csv
import json

import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import HistoryError
from optimizer.history.sources import read_history
from optimizer.search.prior.confirm import choosable
from optimizer.search.prior.match import Script, match_runs
from optimizer.search.prior.seed import seed_from_history
from optimizer.trials.records import TrialSummary

ARGS = ["--samples", "4000"]
CONFIG = "[resources]\ngpu_count_max = 0\ncpu_count_max = 2\nmemory_max = 8.0\n"


def tiny_rate(batch: int, cpus: int) -> float:
    """tests/data/tiny_train.py's samples/s: one step sleeps (alpha + beta*batch) times
    Amdahl's (1 - p) + p/threads."""
    return batch / ((0.004 + 0.00005 * batch) * (0.2 + 0.8 / cpus))


def _trial(folder, tid, cpus, batch, *, status="completed", args=ARGS, train_file="tiny_train.py",
           sha=None, default=False):
    rate = tiny_rate(batch, cpus)
    wall = 0.3 + 4000 / rate
    t = TrialSummary(tid, status, Allocation(0, cpus, 4.0 * cpus, None if default else batch),
                     reason="oom" if status == "failed" else "", wall_time_s=wall,
                     samples=4000.0 if status != "failed" else None,
                     throughput=rate if status != "failed" else None, startup_s=0.3,
                     total_samples=4000.0, mem_gb_peak=0.03 + 0.02 * batch / 64,
                     train_file=f"tests/data/{train_file}", train_args=list(args),
                     model_info={"batch_size": batch},
                     started_at=f"2026-01-01T00:{len(list(folder.glob('*'))):02d}:00.000+00:00")
    t.save(folder / tid)
    if sha:
        (folder / tid / "config.json").write_text(json.dumps({"script_sha256": sha}))


@pytest.fixture(scope="module")
def history_folder(tmp_path_factory):
    """A run folder of earlier runs of tiny_train.py: every setting the baseline plans on two
    CPUs at its batch sizes, and four runs that must be left out."""
    run = tmp_path_factory.mktemp("hist") / "last-week"
    trials = run / "trials"
    for cpus in (1, 2):
        _trial(trials, f"0{cpus}-default", cpus, 64, default=True)
        for batch in (32, 128, 256):
            _trial(trials, f"0{cpus}-b{batch}", cpus, batch)
    _trial(trials, "x-failed", 1, 512, status="failed")
    _trial(trials, "x-args", 2, 512, args=["--samples", "9000"])
    _trial(trials, "x-version", 1, 512, sha="0" * 64)
    _trial(trials, "x-other", 1, 64, train_file="other.py")
    return run


def test_a_run_folder_is_read_as_history(history_folder):
    history = read_history(str(history_folder))
    assert len(history) == 12
    again = read_history(f"cloudopt:{history_folder.parent}")  # a folder of run folders
    assert {r.run_id for r in again} == {r.run_id for r in history}
    run = next(r for r in history if r.run_id == "last-week/01-default")
    assert run.job == "tiny_train" and run.tags["default_batch"] == "1"
    assert run.value("batch_size") == 64 and run.value("cpus") == 1
    assert run.value("throughput") == pytest.approx(tiny_rate(64, 1))
    assert json.loads(run.tags["train_args"]) == ARGS


def test_runs_are_matched_to_the_script_with_reasons(history_folder, repo_root):
    script = Script(repo_root / "tests/data/tiny_train.py", tuple(ARGS),
                    ResourceConfig(gpu_count_max=0, cpu_count_max=2, memory_max=8.0),
                    sha256="f" * 64)
    match = match_runs(read_history(str(history_folder)), script)
    assert len(match.used) == 8
    why = {r.run_id.split("/")[1]: reason for r, reason in match.ignored}
    assert why == {"x-failed": "failed (oom)", "x-args": "ran another command line "
                   "(--samples 9000)", "x-version": "ran another version of the script"}
    assert match.other_jobs == {"other": 1}
    # a machine of one CPU: the 2-CPU runs are outside its bounds
    narrow = Script(script.train_file, script.train_args,
                    ResourceConfig(gpu_count_max=0, cpu_count_max=1, memory_max=8.0))
    left = [why for _, why in match_runs(read_history(str(history_folder)), narrow).ignored]
    assert sum("outside this search's bounds (2 CPUs" in w for w in left) == 5  # x-args too


def test_the_seed_covers_settings_and_the_final_choice_needs_a_real_run(history_folder,
                                                                         repo_root, tmp_path):
    script = Script(repo_root / "tests/data/tiny_train.py", tuple(ARGS),
                    ResourceConfig(gpu_count_max=0, cpu_count_max=2, memory_max=8.0))
    seed = seed_from_history([(str(history_folder), read_history(str(history_folder)))],
                             script, None, tmp_path)
    assert seed.own_batch == 64  # the batch the runs at the script's default ran with
    planned = [Allocation(0, 2, 8.0), Allocation(0, 1, 4.0, 64), Allocation(0, 1, 4.0, 1024)]
    assert seed.uncovered(planned) == [Allocation(0, 1, 4.0, 1024)]
    assert (tmp_path / "history" / seed.trials[0].trial_id / "summary.json").is_file()
    real = TrialSummary("refine-0", "probe", Allocation(0, 2, 8.0, 128), throughput=1.0)
    kept = choosable([*seed.trials, real])
    assert {t.allocation.batch_size for t in kept} == {128}
    assert {t.allocation.cpus for t in kept} == {2} and len(kept) == 2  # its history run too
    assert choosable(seed.trials) == seed.trials  # no real run: history's best stands


def test_a_search_from_history_makes_at_most_two_real_runs(history_folder, repo_root,
                                                           tmp_path):
    config = tmp_path / "two-cpus.toml"
    config.write_text(CONFIG)
    out = tmp_path / "run"
    proc = run_main("--train-file", "tests/data/tiny_train.py", "--preference", "cost",
                    "--config", config, "--train-args", " ".join(ARGS), "--probe-seconds", "0",
                    "--agent-seconds", "0.5", "--live-plan", "off", "--history",
                    history_folder, "--output", out, "--quiet", cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    real = sorted(d.name for d in (out / "trials").iterdir() if (d / "summary.json").is_file())
    assert 1 <= len(real) <= 2, real
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["search"]["runs"] == len(real)  # the budget and the cost count real runs only
    # the history's runs reached the workload fit beside the real ones
    fitted = {p["trial_id"] for p in rec["workload_fit"]["per_point"]}
    assert len({t for t in fitted if t.startswith("history-")}) == 8
    # the recommendation is a setting run for real in this search
    assert not rec["final_trial"].startswith("history-") and "rests_on_history" not in \
        rec["history"]
    assert rec["history"]["runs_used"] == 8 and len(rec["history"]["ignored"]) == 3
    assert any(n.startswith("History: 8 earlier runs of this script") for n in rec["notes"])
    assert "History left out" in (out / "report.md").read_text()
    with open(out / "trials.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    marked = [r for r in rows if r["history_source"]]
    assert len(marked) == 8 and all(r["history_source"].startswith("cloudopt:")
                                    and r["history_run"].startswith("last-week/")
                                    for r in marked)
    assert len(rows) - len(marked) == len(real)


def test_a_spec_with_no_run_of_the_script_is_one_line(tmp_path, repo_root):
    other = tmp_path / "others"
    _trial(other / "trials", "00-default", 1, 64, train_file="other.py")
    proc = run_main("--train-file", "tests/data/tiny_train.py", "--history", other,
                    "--output", tmp_path / "run", cwd=repo_root)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "none usable for tiny_train.py" in lines[0] and "jobs there: other (1)" in lines[0]
    with pytest.raises(HistoryError, match="no cloudopt run folder"):
        read_history(f"cloudopt:{tmp_path / 'run'}")


def test_trials_csv_marks_history_and_readers_skip_those_copies(tmp_path):
    import shutil

    from optimizer.offline.logs import normalise_frame, read_csv_table
    from optimizer.trials.records import write_trials_csv

    run = tmp_path / "run"
    _trial(run / "trials", "00-default", 1, 64, default=True)
    copy = TrialSummary("history-00-g0-c2-m8-b64", "completed", Allocation(0, 2, 8.0, 64),
                        wall_time_s=1.0, throughput=9000.0, samples=4000.0,
                        train_file="tests/data/tiny_train.py", model_info={"model_name": "tiny"},
                        history={"source": "cloudopt:/old", "run_id": "old/00"})
    copy.save(run / "history" / copy.trial_id)
    write_trials_csv(run)
    with open(run / "trials.csv", newline="") as fh:
        rows = {r["trial_id"]: r for r in csv.DictReader(fh)}
    assert rows[copy.trial_id]["history_run"] == "old/00" and not rows["00-default"]["history_run"]
    _, report = normalise_frame(read_csv_table(run / "trials.csv"), "trials.csv")
    assert report.dropped.get("read from history (another run's record)") == 1
    shutil.rmtree(run / "trials")
    shutil.rmtree(run / "history")  # only trials.csv left: the reader falls back to it
    assert [r.run_id for r in read_history(str(run))] == ["run/00-default"]

"""The executor seam without Ray: core leases, trials that shared a machine, and how the
choice of the recommendation treats throughputs measured beside other trials."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.foundation.errors import CloudoptError, ConfigError
from optimizer.foundation.job import Job
from optimizer.search.after_loop.runoff import (
    contenders,
    cpu_neighbour,
    runoff,
    standings,
    still_in,
    tie_note,
)
from optimizer.search.choice import best_measured, objective_table, separated
from optimizer.search.core.state import SearchJob, SearchState
from optimizer.trials.core_lease import CoreLease
from optimizer.trials.executors import make_executor, record_concurrency
from optimizer.trials.executors.base import overlapping
from optimizer.trials.records import TrialSummary


def test_leases_take_distinct_cores_and_wait_for_a_free_one(tmp_path):
    a = CoreLease(1, [0, 1], lock_dir=tmp_path)
    b = CoreLease(1, [0, 1], lock_dir=tmp_path)
    assert a.acquire() == [0] and b.acquire() == [1]
    c = CoreLease(1, [0, 1], lock_dir=tmp_path, timeout_s=0.3)
    with pytest.raises(CloudoptError, match="1 free core"):
        c.acquire()
    a.release()
    assert c.acquire() == [0]
    wide = CoreLease(2, [0, 1], lock_dir=tmp_path, timeout_s=0.2)
    with pytest.raises(CloudoptError):
        wide.acquire()  # all or nothing: it holds no core while it waits
    assert wide.cores == []
    b.release()
    c.release()
    with CoreLease(5, [0, 1], lock_dir=tmp_path) as cores:  # more than exist: all of them
        assert cores == [0, 1]


def test_a_dead_holder_leaves_its_core_free(tmp_path):
    code = ("import sys, time; sys.path.insert(0, '.');"
            "from optimizer.trials.core_lease import CoreLease;"
            f"CoreLease(1, [3], lock_dir={str(tmp_path)!r}).acquire(); print('held', flush=True);"
            "time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(CloudoptError):
        CoreLease(1, [3], lock_dir=tmp_path, timeout_s=0.2).acquire()
    proc.kill()
    proc.wait()
    with CoreLease(1, [3], lock_dir=tmp_path, timeout_s=2) as cores:
        assert cores == [3]


def _trial(tid, cpus, batch, thr, start, end, node="n1", **kw):
    return TrialSummary(
        trial_id=tid, status="completed", allocation=Allocation(0, cpus, 4.0, batch),
        throughput=thr, samples=1000.0, total_samples=1000.0, wall_time_s=1000.0 / thr,
        predicted_total_time_s=1000.0 / thr, mem_gb_peak=1.0,
        started_at=f"2026-01-01T00:00:{start:02d}.000+00:00",
        finished_at=f"2026-01-01T00:00:{end:02d}.000+00:00", node=node, **kw)


def test_trials_that_overlapped_on_one_machine_name_each_other(tmp_path):
    a = _trial("a", 1, 64, 100, 0, 10)
    b = _trial("b", 1, 128, 100, 5, 15)
    c = _trial("c", 1, 32, 100, 16, 20)  # after both
    d = _trial("d", 1, 16, 100, 0, 20, node="n2")  # same time, another machine
    assert overlapping(a, b) and not overlapping(a, c) and not overlapping(a, d)
    done = [(t, tmp_path / t.trial_id) for t in (a, b, c, d)]
    for _, path in done:
        path.mkdir()
    record_concurrency(done)
    assert a.concurrent_with == ["b"] and b.concurrent_with == ["a"]
    assert c.concurrent_with == [] and d.concurrent_with == []
    assert TrialSummary.load(tmp_path / "a").concurrent_with == ["b"]  # rewritten on disk
    assert not (tmp_path / "c" / "summary.json").exists()  # unchanged: not rewritten


def test_a_setting_measured_alone_counts_by_its_runs_alone():
    cfg = load_config()
    trials = [_trial("shared", 1, 64, 80, 0, 10, concurrent_with=["x"]),
              _trial("x", 1, 128, 90, 0, 10, concurrent_with=["shared"]),
              _trial("confirm", 1, 64, 100, 20, 30)]
    table = objective_table(trials, cfg, "time").set_index("trial_id")
    assert table.loc["confirm", "job_time_s"] == pytest.approx(10.0)  # the run alone only
    assert table.loc["confirm", "replicates"] == 1 and table.loc["confirm", "alone"]
    assert not table.loc["x", "alone"]
    best, _ = best_measured(trials, cfg, "time")
    assert best.trial_id == "confirm"


def test_settings_that_decide_go_to_the_runoff():
    cfg = load_config()
    # Beside others, b128 ran 12% slower than b64 alone: within reach once the slowdown is
    # allowed for, so both go to the run-off (b32, far behind, does not).
    trials = [_trial("b64", 2, 64, 100, 0, 10),
              _trial("b128", 1, 128, 88, 0, 10, concurrent_with=["b32"]),
              _trial("b32", 1, 32, 40, 0, 10, concurrent_with=["b128"])]
    assert list(contenders(objective_table(trials, cfg, "time"))["trial_id"]) == ["b128", "b64"]
    alone = [_trial("fast", 2, 64, 100, 0, 10), _trial("slow", 1, 64, 50, 10, 20)]
    assert list(contenders(objective_table(alone, cfg, "time"))["trial_id"]) == ["fast"]


def test_executor_choice_is_checked():
    with pytest.raises(ConfigError, match="unknown executor 'slurm'"):
        make_executor("slurm")
    with pytest.raises(ConfigError, match=r"\[run\].executor"):
        load_config(overrides={"run": {"executor": "slurm"}})
    assert make_executor("local").name == "local"


def test_ray_executor_without_ray_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(CloudoptError, match=r"pip install 'cloudopt\[ray\]'"):
        make_executor("ray")


def test_main_command_without_ray_fails_cleanly(tmp_path, repo_root, monkeypatch):
    code = ("import sys; sys.modules['ray'] = None; from optimizer.cli import main;"
            f"sys.exit(main(['--train-file', 'tests/data/tiny_train.py', '--executor', 'ray',"
            f" '--output', {str(tmp_path / 'run')!r}, '--quiet']))")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs Ray: pip install 'cloudopt[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # refused before any run folder or trial
    assert time.monotonic() - t0 < 60


def test_a_runoff_contender_leaves_once_separated_from_the_leader():
    cfg = load_config()
    apart = [_trial("a1", 2, 64, 100, 0, 10), _trial("b1", 1, 64, 80, 10, 20),
             _trial("a2", 2, 64, 98, 20, 30), _trial("b2", 1, 64, 79, 30, 40)]
    assert list(still_in(objective_table(apart, cfg, "time"))["trial_id"]) == ["a2"]
    close = [_trial("a1", 2, 64, 100, 0, 10), _trial("b1", 1, 64, 97, 10, 20),
             _trial("a2", 2, 64, 96, 20, 30), _trial("b2", 1, 64, 99, 30, 40)]
    assert len(still_in(objective_table(close, cfg, "time"))) == 2


class _DriftingMachine:
    """A fake search port whose machine slows down by 10% an hour; ``speed`` holds each
    setting's throughput on the machine at full speed. Runs are recorded by name."""

    budget = None  # no limit unless a test sets one

    def __init__(self, speed, start_hour=0):
        self.config, self.user_preference = load_config(), "time"
        self.speed, self.hour, self.recorded = speed, start_hour, {}

    def measure(self, manager, alloc, prefix, run_dir, opts, total):
        name = f"{prefix}-{alloc.key()}"
        if name not in self.recorded:
            self.hour += 1
            speed = self.speed.get((alloc.cpus, alloc.batch_size)) or self.speed[alloc.batch_size]
            thr = speed / (1 + 0.1 * self.hour)
            t = _trial(name, alloc.cpus, alloc.batch_size, thr, 0, 1)
            t.allocation = alloc
            t.started_at = f"2026-01-01T{self.hour:02d}:00:00.000+00:00"
            self.recorded[name] = t
        return self.recorded[name]

    def label_batch(self, trial, path, settable):
        return trial


SPEC = Job(Path("train.py"), batch_control="flag")
"""The job the run-off works for: a script whose batch size trials can set."""


def _runoff(machine, trials, run_dir, rounds):
    """The run-off on ``machine`` (a fake port), adding to ``trials`` and ``rounds``."""
    state = SearchState(machine, SearchJob(None, run_dir, SPEC), trials, rounds,
                        efficiency=getattr(machine, "efficiency", None))
    return runoff(state)


def test_the_runoff_measures_the_contenders_back_to_back_and_decides_alone(tmp_path):
    cfg = load_config()
    # b64 is 8% faster, but it was probed in a slow hour and b128 in a fast one: pooled over
    # hours, b128 looks better; measured back to back, b64 wins.
    earlier = [_trial("b64", 1, 64, 92, 0, 1), _trial("b128", 1, 128, 100, 0, 1)]
    machine = _DriftingMachine({64: 108, 128: 100})
    trials, rounds = list(earlier), []
    block = _runoff(machine, trials, tmp_path, rounds)
    assert len(block) >= 4 and all(r["proposed_by"] == "run-off" for r in rounds)
    ran = [t.allocation.batch_size for t in trials[2:]]
    assert ran[:4] == [128, 64, 64, 128]  # every round runs both, the order rotating
    assert best_measured(trials, cfg, "time", runoff=block)[0].allocation.batch_size == 64
    table = standings(trials, block, cfg, "time")
    assert [r["setting"].endswith("b64") for r in table] == [True, False]
    assert table[0]["objective"] < table[1]["objective"] and table[0]["runs"] >= 2
    assert table[0]["margin"] == 0.0 and not table[0]["tied"] and table[1]["margin"] > 0
    # Resumed: the same contenders, every run reloaded as recorded, nothing measured again.
    hour = machine.hour
    again = list(earlier)
    assert _runoff(machine, again, tmp_path, []) == block
    assert machine.hour == hour
    # One setting far ahead: no run-off, the choice is made over all trials; measured once,
    # it runs once more, so its figures are a mean of two runs and never one run's luck.
    lone = [_trial("b64", 1, 64, 150, 0, 1), _trial("b128", 1, 128, 100, 0, 1)]
    lone_rounds: list = []
    assert _runoff(_DriftingMachine({64: 150, 128: 100}), lone, tmp_path, lone_rounds) == []
    assert [t.trial_id for t in lone[2:]] == ["runoff-again-time-g0-c1-m4-b64"]
    assert "the only contender, was measured once" in lone_rounds[0]["why"]
    row = best_measured(lone, cfg, "time")[1]
    assert row["replicates"] == 2 and row["time_rel_sd"] > 0
    # Measured twice already: nothing more.
    twice = [*lone[:2], _trial("b64-2", 1, 64, 140, 2, 3)]
    assert _runoff(_DriftingMachine({64: 150, 128: 100}), twice, tmp_path / "2", []) == []
    assert len(twice) == 3


def test_the_leader_at_half_its_cpus_joins_the_runoff_where_no_trial_ran_it(tmp_path):
    """cnn's case on the 2-core machine: small steps ran faster on 1 CPU than on 2, which a
    model fitted to 1-CPU probes at other batches missed; only a run of it shows it."""
    probes = [_trial("c2-b16", 2, 16, 100, 0, 1), _trial("c1-b32", 1, 32, 70, 0, 1),
              _trial("c2-b32", 2, 32, 80, 0, 1)]
    leader = probes[0].allocation
    half = cpu_neighbour(leader, probes)
    assert (half.cpus, half.batch_size, half.memory_gb) == (1, 16, leader.memory_gb)
    assert cpu_neighbour(probes[1].allocation, probes) is None  # 1 CPU: none below it
    assert cpu_neighbour(leader, probes, cpu_min=2) is None
    ran = [*probes, _trial("c1-b16", 1, 16, 60, 0, 1)]
    assert cpu_neighbour(leader, ran) is None  # measured, and far behind: no second chance
    machine = _DriftingMachine({(2, 16): 100, (1, 16): 112, 32: 70})
    trials, rounds = list(probes), []
    block = _runoff(machine, trials, tmp_path, rounds)
    assert {(t.allocation.cpus, t.allocation.batch_size) for t in trials[3:]} == {(2, 16), (1, 16)}
    assert "the leader at half its CPUs, which no trial ran" in rounds[0]["why"]
    best = best_measured(trials, machine.config, "time", runoff=block)[0]
    assert (best.allocation.cpus, best.allocation.batch_size) == (1, 16)
    # A full field keeps the neighbour second, so a budget that trims the field keeps it.
    close = [_trial(f"w{w}", 2, 16, thr, 0, 1) for w, thr in ((0, 100), (1, 99), (4, 98))]
    for t, w in zip(close, (0, 1, 4), strict=True):
        t.allocation = Allocation(0, 2, 4.0, 16, w)
    machine = _DriftingMachine({16: 100})
    trials = list(close)
    _runoff(machine, trials, tmp_path / "full", [])
    assert [(t.allocation.cpus, t.allocation.workers) for t in trials[3:6]] == \
        [(2, 0), (1, 0), (2, 1)]


def test_two_settings_are_separated_only_beyond_the_runs_noise():
    def row(objective, rel_sd, runs):
        return {"objective": objective, "time_rel_sd": rel_sd, "replicates": runs}

    # Five runs each with the 5% floor: twice the standard error of the gap is 0.63 at 10.
    assert not separated(row(10.0, 0.01, 5), row(10.3, 0.01, 5))
    assert separated(row(10.0, 0.01, 5), row(11.0, 0.01, 5))
    # The same gap with runs that spread by 20% is noise; so is one run each.
    assert not separated(row(10.0, 0.2, 5), row(11.0, 0.2, 5))
    assert not separated(row(10.0, None, 1), row(11.0, None, 1))


def test_runoff_rounds_and_size_are_the_users(tmp_path):
    close = [_trial("b64", 1, 64, 100, 0, 1), _trial("b128", 1, 128, 98, 0, 1),
             _trial("b256", 1, 256, 97, 0, 1)]
    # [run].runoff_size = 2: the two best settings only; runoff_rounds = 2: two rounds of them.
    machine = _DriftingMachine({64: 100, 128: 98, 256: 97})
    machine.config = load_config(overrides={"run": {"runoff_rounds": 2, "runoff_size": 2}})
    trials = list(close)
    block = _runoff(machine, trials, tmp_path, [])
    assert len(block) == 4
    assert {t.allocation.batch_size for t in trials[3:]} == {64, 128}
    # Two runs each, 2% apart: the runs' noise cannot separate them, and the choice says so.
    table = standings(trials, block, machine.config, "time")
    assert table[1]["tied"] and 0 < table[1]["margin"] < 0.05
    assert f"within the runs' noise of it: {table[1]['words']} ($" in tie_note(table)
    assert tie_note(table[:1]) == ""
    # runoff_rounds = 0: nothing is measured again and the choice is left to all trials.
    machine = _DriftingMachine({64: 100, 128: 98, 256: 97})
    machine.config = load_config(overrides={"run": {"runoff_rounds": 0}})
    trials = list(close)
    assert _runoff(machine, trials, tmp_path / "none", []) == []
    assert len(trials) == 3 and machine.hour == 0
    with pytest.raises(ConfigError, match=r"\[run\].runoff_size"):
        load_config(overrides={"run": {"runoff_size": 1}})


def test_a_budget_short_of_a_whole_round_runs_off_the_best_settings_it_can_afford(tmp_path):
    """At 8 runs the search keeps 2 for the run-off; with three close settings a whole round
    (3 runs) did not fit, and the 2 runs went unused: the two best now run back to back."""
    class TwoLeft:
        total = 8

        def left(self, reserve=0):
            return 2

        def limit(self, wanted, reserve=0):
            return min(wanted, 2)

        def allows(self, n=1, reserve=0):
            return n <= 2

    close = [_trial("b64", 1, 64, 100, 0, 1), _trial("b128", 1, 128, 98, 0, 1),
             _trial("b256", 1, 256, 97, 0, 1)]
    machine = _DriftingMachine({64: 100, 128: 98, 256: 97})
    machine.budget = TwoLeft()
    trials = list(close)
    block = _runoff(machine, trials, tmp_path, [])
    assert len(block) == 2 and {t.allocation.batch_size for t in trials[3:]} == {64, 128}


def test_trial_folders_of_dead_workers_are_removed(tmp_path):
    from optimizer.trials.executors.ray_executor import TRIAL_PREFIX, remove_orphaned_folders

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a process id that no longer runs
    dead = tmp_path / f"{TRIAL_PREFIX}{proc.pid}-abc"
    alive = tmp_path / f"{TRIAL_PREFIX}{os.getpid()}-def"
    other = tmp_path / "cloudopt-trial-notapid"
    for d in (dead, alive, other):
        (d / "trial").mkdir(parents=True)
    assert remove_orphaned_folders(str(tmp_path)) == [dead]
    assert alive.exists() and other.exists() and not dead.exists()

"""The live controller (issue 40): the probe's stages online and offline, a plan applied to a
running job phase by phase and billed per interval, a plan whose phases never appear leaves
the job static, and the controller's death leaves the job running at its largest allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import ConfigError
from optimizer.trials.live import LiveTrial, read_changes
from optimizer.trials.live.controller import (
    Controller,
    PlanDecider,
    ReactiveDecider,
    ScheduleDecider,
    billed_cost,
    held_seconds,
    wait_for,
)
from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry
from optimizer.trials.live.session import LiveSetup
from optimizer.trials.live.stages import StageTracker, stage_intervals
from optimizer.trials.run.request import TrialRequest

needs_two_cores = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and two cores")


def _plan(**phases: tuple[int, float | None]) -> LivePlan:
    return LivePlan(phases={k: PhaseEntry(PhaseAllocation(c, m)) for k, (c, m) in phases.items()},
                    fallback=PhaseAllocation(2, 1.0), interval_s=0.2, source="test")


def test_stages_from_events_offline():
    tr = StageTracker(pause_s=1.0)
    events = [{"e": "header", "t": 0, "wall": 100.0}, {"e": "torch", "t": 0.5},
              {"e": "first_step", "t": 2.0}, {"e": "steps", "t": 2.1, "n": 3},
              {"e": "steps", "t": 3.0, "n": 5}, {"e": "mode", "t": 3.2, "train": False},
              {"e": "mode", "t": 4.0, "train": True}, {"e": "steps", "n": 0, "t": 4.0},
              {"e": "steps", "t": 4.5, "n": 2}, {"e": "save", "t": 4.6},
              {"e": "save_end", "t": 5.0}, {"e": "steps", "t": 5.2, "n": 2},
              {"e": "steps", "t": 8.0, "n": 1}, {"e": "steps", "t": 8.3, "n": 2},
              {"e": "exit", "t": 10.0}]
    for ev in events:
        tr.feed(ev)
    stages = [s for _, _, s in tr.closed_intervals()]
    # The one step event after the checkpoint is followed by a long gap: a pause from there.
    assert stages == ["startup", "train", "eval", "train", "save", "pause", "train", "pause"]
    spans = tr.closed_intervals()
    assert spans[0] == (0.0, 2.0, "startup") and spans[2] == (3.2, 4.0, "eval")
    assert spans[5] == (5.2, 8.0, "pause")  # the whole gap between steps, offline
    assert spans[-1] == (8.3, 10.0, "pause")  # after the last step: the job's end
    assert spans[4] == (4.6, 5.2, "save")  # until training resumes, not until torch.save returns


def test_a_checkpoint_lasts_until_training_resumes_online():
    """What a script does after ``torch.save`` (compress, hash, write) is still its checkpoint:
    the stage stays ``save``, never ``pause``, until the next step or a change of mode."""
    tr = StageTracker(pause_s=1.0)
    for ev in ({"e": "header", "t": 0, "wall": 50.0}, {"e": "first_step", "t": 1.0},
               {"e": "steps", "t": 1.1, "n": 2}, {"e": "save", "t": 1.2},
               {"e": "save_end", "t": 1.3}):
        tr.feed(ev)
    assert tr.stage_at(1.4) == "save" and tr.stage_at(3.5) == "save"
    tr.feed({"e": "steps", "t": 3.6, "n": 1})
    assert tr.stage_at(3.7) == "train"
    tr.feed({"e": "save", "t": 4.0})
    tr.feed({"e": "save_end", "t": 4.1})
    tr.feed({"e": "mode", "t": 4.5, "train": False})
    assert tr.stage_at(4.6) == "eval"
    assert [s for _, _, s in tr.closed_intervals(5.0)] == [
        "startup", "train", "save", "train", "save", "eval"]


def test_the_online_stage_turns_to_pause_only_after_the_pause_delay():
    tr = StageTracker(pause_s=1.0)
    for ev in ({"e": "header", "t": 0, "wall": 50.0}, {"e": "first_step", "t": 1.0},
               {"e": "steps", "t": 1.1, "n": 2}):
        tr.feed(ev)
    assert tr.stage_at(1.5) == "train" and tr.stage_at(2.2) == "pause"
    assert tr.probe_time(wall=53.0) == 3.0


def test_plan_round_trip_and_errors(tmp_path):
    plan = _plan(startup=(1, 0.5), train=(2, 1.0))
    plan.schedule = ["startup", "train"]
    path = plan.save(tmp_path)
    back = LivePlan.load(tmp_path)
    assert back.phases["startup"].allocation == PhaseAllocation(1, 0.5)
    assert back.allocation_for("eval") == back.fallback and not back.is_static
    path.write_text('{"version": 1, "phases": {"train": {"allocation": {"cpus": 0}}}, '
                    '"fallback": {"cpus": 1}}')
    with pytest.raises(ConfigError, match=r"live-plan.json: phases.train: cpus"):
        LivePlan.load(path)
    with pytest.raises(ConfigError, match="no live plan here"):
        LivePlan.load(tmp_path / "nowhere")


def test_billing_per_interval_at_the_allocation_held():
    timeline = [(0.0, 2, 1.0), (4.0, 1, 1.0), (6.0, 2, 2.0)]
    cpu_s, gb_s = held_seconds(timeline, 10.0)
    assert cpu_s == pytest.approx(2 * 4 + 1 * 2 + 2 * 4)
    assert gb_s == pytest.approx(1 * 6 + 2 * 4)
    cost = billed_cost(timeline, 10.0, gpus=0, cost_per_cpu_hour=3600.0, cost_per_gb_hour=0.0,
                       cost_per_gpu_hour=99.0)
    assert cost == pytest.approx(18.0)


def test_reactive_and_schedule_deciders():
    react = ReactiveDecider(max_cpus=4, window_s=2.0)
    rows = [{"time_s": 9.0, "cpu_cores": 1.05, "mem_gb": 0.5},
            {"time_s": 10.0, "cpu_cores": 0.98, "mem_gb": 0.6}]
    alloc, _ = react.decide(None, rows, 10.0, PhaseAllocation(3, 2.0))
    assert alloc.cpus == 1 and alloc.memory_gb == pytest.approx(0.69)
    saturated = [{"time_s": 10.0, "cpu_cores": 1.97, "mem_gb": 0.5}]
    assert react.decide(None, saturated, 10.0, PhaseAllocation(2, 1.0))[0].cpus == 3
    trend = ReactiveDecider(max_cpus=4, kind="reactive-trend")
    assert trend.decide(None, rows, 10.0, PhaseAllocation(1, 1.0))[0].memory_gb == \
        pytest.approx(0.7 * 1.15)
    sched = ScheduleDecider([(0.0, PhaseAllocation(1)), (0.5, PhaseAllocation(2))], 10.0)
    assert sched.decide(None, [], 4.0, PhaseAllocation(1))[0].cpus == 1
    assert sched.decide(None, [], 6.0, PhaseAllocation(1))[0].cpus == 2


def _sleeper(tmp_path):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


def _affinity(pid):
    return os.sched_getaffinity(pid)


@needs_two_cores
def test_a_plan_whose_phases_never_appear_leaves_the_job_static(tmp_path):
    proc = _sleeper(tmp_path)
    try:
        live = LiveTrial(proc.pid, tmp_path)
        ctl = Controller(live, PlanDecider(_plan(eval=(1, None))), lambda: "train",
                         cores=[0, 1], initial=PhaseAllocation(2, 1.0), interval_s=0.05)
        for _ in range(5):
            ctl.step()
        assert read_changes(tmp_path) == [] and ctl.timeline == [(0.0, 2, 1.0)]
        assert ctl.phases_seen == {"train": 5}
    finally:
        proc.kill()
        proc.wait()


@needs_two_cores
def test_a_stage_change_is_acted_on_at_once_not_at_the_next_interval(tmp_path):
    """A controller watching the probe's stages moves the job within a watch period of the
    change, although its decision interval is far longer."""
    proc = _sleeper(tmp_path)
    stage = ["save"]
    try:
        os.sched_setaffinity(proc.pid, {0, 1})
        ctl = Controller(LiveTrial(proc.pid, tmp_path),
                         PlanDecider(_plan(save=(1, None), train=(2, None))), lambda: stage[0],
                         cores=[0, 1], initial=PhaseAllocation(2, None), interval_s=30.0,
                         watch_s=0.02)
        ctl.start()
        assert wait_for(lambda: _affinity(proc.pid) == {0}, 2.0)
        time.sleep(0.2)
        stage[0], t0 = "train", time.monotonic()
        assert wait_for(lambda: _affinity(proc.pid) == {0, 1}, 2.0)
        assert time.monotonic() - t0 < 1.0  # not the 30 s interval
        ctl.stop()
        assert [len(c.cpus) for c in read_changes(tmp_path) if c.cpus] == [1, 2]
    finally:
        proc.kill()
        proc.wait()


LOADS = textwrap.dedent("""
    import os, torch
    print(torch.get_num_threads(), sorted(os.sched_getaffinity(0)))
""")


def _launched_on(cores):
    return lambda: os.sched_setaffinity(0, cores)


@needs_two_cores
@pytest.mark.parametrize("load_cores, threads", [("0,1", 2), (None, 1)])
def test_a_live_job_held_on_one_core_loads_torch_on_the_cores_it_may_be_given(
        tmp_path, load_cores, threads):
    """GNU OpenMP counts a process's CPUs once, when torch loads it, and throttles its
    threads' spinning for the whole run where it runs more threads than it counted: a job
    loaded on one core and trained on two ran 8-10% slower. A live trial's probe loads torch
    on the cores the controller may give (torch's default threads show the count), then puts
    the job back on the core it is held on."""
    from optimizer.trials.probe import probe_environment

    script = tmp_path / "loads.py"
    script.write_text(LOADS)
    env = probe_environment(os.environ, tmp_path / "probe.jsonl", tmp_path / "control.json")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the suite's own, for its speed
        env.pop(var, None)
    if load_cores:
        env["CLOUDOPT_LOAD_CORES"] = load_cores
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=120, preexec_fn=_launched_on({0}))
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = [json.loads(line) for line in (tmp_path / "probe.jsonl").read_text().splitlines()]
    # torch's default threads are what OpenMP counted at load; then one thread on its core
    assert [e["num_threads"] for e in loaded if e["e"] == "torch"] == [threads]
    assert out.stdout.split() == ["1", "[0]"]


@needs_two_cores
def test_after_loading_the_job_follows_a_controller_that_moved_it_meanwhile(tmp_path,
                                                                           monkeypatch):
    import importlib

    site = os.path.join(os.path.dirname(__file__), "..", "optimizer", "trials", "probe", "site")
    monkeypatch.syspath_prepend(site)
    load = importlib.import_module("_cloudopt_probe_load")
    control = tmp_path / "control.json"
    control.write_text(json.dumps({"seq": 1, "num_threads": 1, "cpus": [0]}))
    monkeypatch.setenv("CLOUDOPT_PROBE_CONTROL", str(control))
    monkeypatch.setenv("CLOUDOPT_LOAD_CORES", "0,1")
    mine = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {0})
        token = load.widen()
        assert os.sched_getaffinity(0) == {0, 1} and token == ({0}, 1)
        load.restore(token)  # nothing moved: back on the core it was held on
        assert os.sched_getaffinity(0) == {0}
        token = load.widen()
        control.write_text(json.dumps({"seq": 2, "num_threads": 2, "cpus": [1]}))
        load.restore(token)  # the controller's newer order wins
        assert os.sched_getaffinity(0) == {1}
        monkeypatch.setenv("CLOUDOPT_LOAD_CORES", "1")
        assert load.widen() is None  # nothing wider to load on
    finally:
        os.sched_setaffinity(0, mine)


@needs_two_cores
def test_the_controllers_death_gives_the_job_its_largest_allocation(tmp_path):
    """A controller that fails mid-run leaves the job running, at the largest allocation it
    could have asked for, not at the last stage's (a later stage may need more)."""
    proc = _sleeper(tmp_path)
    calls = []

    class Flaky:
        name = "flaky"

        def decide(self, phase, usage, elapsed_s, held):
            calls.append(phase)
            if len(calls) > 1:
                raise RuntimeError("lost the phase model")
            return PhaseAllocation(1, None), "first decision"

    try:
        os.sched_setaffinity(proc.pid, {0, 1})
        ctl = Controller(LiveTrial(proc.pid, tmp_path), Flaky(), lambda: "startup",
                         cores=[0, 1], initial=PhaseAllocation(2, None), interval_s=0.05)
        ctl.start()
        assert wait_for(lambda: not ctl.is_alive(), 5.0)
        assert "lost the phase model" in (ctl.error or "")
        assert proc.poll() is None, "the job died with its controller"
        assert _affinity(proc.pid) == {0, 1}, "the largest allocation was not restored"
        logged = read_changes(tmp_path)
        assert logged[0].cpus == [0] and "controller stopped" in logged[1].cause
        assert "restore the largest allocation" in logged[-1].cause and logged[-1].cpus == [0, 1]
        assert ctl.settled.is_set() and ctl.timeline[-1][1] == 2
    finally:
        proc.kill()
        proc.wait()


PHASED = textwrap.dedent("""
    import sys, time
    import torch
    def busy(seconds):  # one thread of pure Python: more cores do not help
        end = time.time() + seconds
        while time.time() < end:
            sum(range(2000))
    busy(1.2)  # start-up: data preparation
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 128), torch.randint(0, 4, (256,))
    grow = []
    for epoch in range(2):
        model.train()
        end = time.time() + 1.0
        while time.time() < end:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        grow.append(b"x" * (150 * 2**20))  # training holds 150 MB more each epoch (touched)
        model.eval()
        with torch.no_grad():
            busy(1.2)
    torch.save(model.state_dict(), sys.argv[1])
    print("loss", float(loss))
""")


@needs_two_cores
def test_a_plan_follows_the_running_jobs_stages_and_is_billed_per_interval(tmp_path):
    from optimizer.trials.training import TrainingModuleManager

    script = tmp_path / "phased.py"
    script.write_text(PHASED)
    plan = _plan(startup=(1, 0.6), train=(2, 0.9), eval=(1, 0.2), pause=(1, 0.2))
    manager = TrainingModuleManager(script, train_args=[str(tmp_path / "model.pt")])
    resources = ResourceConfig()
    setup = LiveSetup(PlanDecider(plan), interval_s=0.2, pause_s=1.0, label="plan",
                      memory_mode="limit")
    summary = manager.run_training(TrialRequest(Allocation(cpus=2, memory_gb=1.0),
                                                tmp_path / "trial", live=setup,
                                                timeout_s=60), resources)
    assert summary.status == "completed", summary.reason
    changes = read_changes(tmp_path / "trial")
    cpu_phases = [(c.phase, len(c.cpus)) for c in changes if c.cpus]
    assert cpu_phases[0] == ("startup", 1)
    assert ("train", 2) in cpu_phases and ("eval", 1) in cpu_phases
    # The eval phase asks for 0.2 GB while the job holds more: the limit goes down only after
    # the hold-down, and then only to the stage's measured peak with headroom; no kill.
    eval_mem = [c for c in changes if c.phase == "eval" and c.memory_limit_gb is not None]
    assert all(c.memory_limit_gb > 0.2 and "peak" in c.cause for c in eval_mem)
    live = summary.live
    assert live["changes"] >= 4 and {"startup", "train", "eval"} <= set(live["phases_seen"])
    static_cost = summary.wall_time_s * (2 * resources.cost_per_cpu_hour
                                         + 1.0 * resources.cost_per_gb_hour) / 3600
    assert summary.cost < 0.9 * static_cost
    assert (tmp_path / "trial" / "changes.jsonl").is_file()
    spans = stage_intervals(tmp_path / "trial" / "probe.jsonl")
    assert [s for _, _, s in spans][:3] == ["startup", "train", "eval"]
    assert any(s == "save" for _, _, s in spans)
    assert spans[0][1] > 1.2  # start-up ends at the first step, after the busy loop


CHECKPOINTING = textwrap.dedent("""
    import io, time, zlib
    import torch
    model = torch.nn.Linear(64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
    def train(seconds):
        end = time.time() + seconds
        while time.time() < end:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    train(0.5)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    end = time.time() + 0.8
    while time.time() < end:  # compress and hash the checkpoint, after torch.save returned
        zlib.compress(buf.getvalue() * 20, 6)
    train(0.5)
""")


RESUMING = textwrap.dedent("""
    import io, os, sys, time, zlib
    import torch
    torch.set_num_threads(2)
    model = torch.nn.Linear(64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    for _ in range(20):
        step()
    torch.save(model.state_dict(), io.BytesIO())
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the controller's one core
    zlib.compress(os.urandom(1 << 20), 6)
    step()
    print("threads", torch.get_num_threads())
""")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_live_probe_ends_the_checkpoint_at_the_first_forward_with_threads_for_its_cores(
        tmp_path):
    """checkpoint_heavy under its plan: one core for each save, and the first iteration after
    it ran two threads on that core (0.25 s a checkpoint, +9% on the job)."""
    from optimizer.trials.probe import probe_environment

    script, events = tmp_path / "resume.py", tmp_path / "probe.jsonl"
    script.write_text(RESUMING)
    env = probe_environment(os.environ, events, tmp_path / "probe-control.json")
    out = subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120,
                         capture_output=True, text=True).stdout
    assert "threads 1" in out  # clamped to the one core before the forward pass ran
    lines = [json.loads(x) for x in events.read_text().splitlines()]
    kinds = [e["e"] for e in lines]
    end = kinds.index("save_end")
    resume = kinds.index("resume")
    first_step = next(i for i in range(end + 1, len(lines))
                      if kinds[i] == "steps" and lines[i].get("n"))
    assert end < resume < first_step and lines[resume]["step"] == 20
    spans = stage_intervals(events)
    saves = [(a, b) for a, b, st in spans if st == "save"]
    assert len(saves) == 1 and saves[0][1] == pytest.approx(lines[resume]["t"], abs=1e-3)
    # without a controller (no control file) the script's threads are its own
    env = probe_environment(os.environ, tmp_path / "plain.jsonl", None)
    out = subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120,
                         capture_output=True, text=True).stdout
    assert "threads 2" in out


def test_the_probe_marks_a_checkpoint_until_training_resumes(tmp_path):
    """The work after ``torch.save`` belongs to the checkpoint, and the first step after it
    is written at once (a controller sees training resume within its interval)."""
    from optimizer.trials.probe import probe_environment

    script, events = tmp_path / "ckpt.py", tmp_path / "probe.jsonl"
    script.write_text(CHECKPOINTING)
    env = probe_environment(os.environ, events, None)
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120)
    spans = stage_intervals(events)
    saves = [(a, b) for a, b, s in spans if s == "save"]
    assert len(saves) == 1 and saves[0][1] - saves[0][0] >= 0.7, spans
    assert [s for _, _, s in spans][-2:] == ["save", "train"]
    lines = [json.loads(x) for x in events.read_text().splitlines()]
    end = next(i for i, e in enumerate(lines) if e.get("e") == "save_end")
    resumed = next(e for e in lines[end + 1:] if e.get("e") == "steps" and e.get("n"))
    assert resumed["t"] - saves[0][1] < 0.05  # the event is the resuming step's own


def test_a_live_trial_is_launched_on_its_first_phases_cores_of_those_it_may_be_given():
    from optimizer.trials.live.session import launch_cores

    setup = LiveSetup(PlanDecider(_plan(startup=(1, None), train=(2, None))), start_cpus=1)
    assert launch_cores(setup, [0, 1]) == [0]
    assert launch_cores(LiveSetup(setup.decider), [0, 1]) == [0, 1]
    assert launch_cores(None, [2, 3]) == [2, 3]
    assert launch_cores(LiveSetup(setup.decider, start_cpus=8), [0, 1]) == [0, 1]

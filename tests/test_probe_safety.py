"""The probe never hurts the job it watches: a write that fails switches it off (the script's
output and exit code unchanged), a forked child writes nothing of the parent's, a control
file cannot ask for more threads than cores, and the gradient window's copy is bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from optimizer.trials.probe import probe_environment, read_probe

torch = pytest.importorskip("torch")

DATA = Path(__file__).parent / "data"


def _run(tmp_path: Path, script: Path, events: Path | None, *args: str,
         extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ) if events is None else probe_environment(os.environ, events)
    env.update(extra or {})
    return subprocess.run([sys.executable, str(script), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_full_disk_switches_the_probe_off_and_the_script_never_knows(tmp_path):
    script = DATA / "update_styles_train.py"
    alone = _run(tmp_path, script, None, "--style", "scaler")
    full = _run(tmp_path, script, Path("/dev/full"), "--style", "scaler")
    assert (full.returncode, full.stdout, full.stderr) == (alone.returncode, alone.stdout,
                                                           alone.stderr)
    assert full.returncode == 0


FORKS = """
import os, sys
import torch
pid = os.fork()
if pid == 0:
    sys.exit(0)  # the child's interpreter shuts down: atexit and buffer flushes run
os.waitpid(pid, 0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad(); model(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
print("done")
"""


def test_a_forked_child_writes_nothing_of_its_parents(tmp_path):
    script = tmp_path / "forks.py"
    script.write_text(textwrap.dedent(FORKS))
    events = tmp_path / "events.jsonl"
    out = _run(tmp_path, script, events)
    assert out.returncode == 0 and out.stdout.strip() == "done"
    kinds = [json.loads(line)["e"] for line in events.read_text().splitlines()]
    assert kinds.count("header") == 1 and kinds.count("torch") == 1 and kinds.count("exit") == 1
    assert read_probe(events).steps == 3


def test_a_control_file_gets_no_more_threads_than_cores(tmp_path):
    events = tmp_path / "events.jsonl"
    control = tmp_path / "probe-control.json"
    control.write_text(json.dumps({"seq": 1, "num_threads": 512}))
    env = probe_environment(os.environ, events, control)
    out = subprocess.run([sys.executable, str(DATA / "update_styles_train.py"), "--style",
                          "noloader", "--epochs", "4"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rec = read_probe(events)
    assert rec.controls and all(1 <= c["num_threads"] <= len(os.sched_getaffinity(0))
                                for c in rec.controls)


def test_the_gradient_window_follows_a_bounded_subset_and_reads_as_the_whole(tmp_path):
    script, args = DATA / "update_styles_train.py", ("--style", "accum")
    whole = _run(tmp_path, script, tmp_path / "whole.jsonl", *args)
    part = _run(tmp_path, script, tmp_path / "part.jsonl", *args,
                extra={"CLOUDOPT_PROBE_WINDOW_ELEMENTS": "4"})  # 9 elements: every 3rd
    assert whole.returncode == part.returncode == 0
    raw = [json.loads(line) for line in (tmp_path / "part.jsonl").read_text().splitlines()]
    assert {e["stride"] for e in raw if e["e"] == "gradwin"} == {3}
    full, sub = read_probe(tmp_path / "whole.jsonl"), read_probe(tmp_path / "part.jsonl")
    a, b = full.windows[0], sub.windows[0]
    # the same steps (seeded): a subset's norms, scaled by the stride, near the full ones
    assert a["step"] == b["step"]
    for x, y in zip([*a["small"], a["big"]], [*b["small"], b["big"]], strict=True):
        assert 0.2 < y / x < 5

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
from conftest import need

from optimizer.trials.probe import probe_environment, read_probe

torch = need("torch")

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


# --- a control file holding anything at the job's ``import torch`` ------------------------

FAKE_TORCH = """__version__ = "0.0-fake"
_n = 1
def get_num_threads():
    return _n
def set_num_threads(n):
    global _n
    _n = n
"""
IMPORTS = "import os, torch; print('imported', sorted(os.sched_getaffinity(0)))"
CONTROL_SHAPES = {
    # a seq of NaN never equals itself: the order reads as the controller's new one, so its
    # cpus are what the restore after the import uses
    "cpus of lists": '{"seq": NaN, "cpus": [[0]]}',
    "cpus of strings": '{"seq": NaN, "cpus": ["x"]}',
    "cpus of floats": '{"seq": NaN, "cpus": [0.5, 1e400]}',
    "cpus of booleans": '{"seq": NaN, "cpus": [true]}',
    "cpus negative": '{"seq": NaN, "cpus": [-1]}',
    "cpus past any machine": '{"seq": NaN, "cpus": [99999999999999999999999]}',
    "cpus a map": '{"seq": NaN, "cpus": {"0": 1}}',
    "cpus empty": '{"seq": NaN, "cpus": []}',
    "a seq of lists": '{"seq": [1], "cpus": [0]}',
    "threads a string": '{"seq": NaN, "num_threads": "x"}',
    "threads huge": '{"seq": NaN, "num_threads": 1e308}',
    "a list": "[1, 2]",
    "a string": '"cpus"',
    "null": "null",
    "a number": "12",
    "truncated": '{"seq": 1, "cpus": [0',
    "not UTF-8": b"\xff\xfe\x00{",
    "nested past the recursion limit": "[" * 100000,
    "empty": "",
}


def _import_under(tmp_path: Path, content, *, real_torch: bool = False,
                  script: str = IMPORTS) -> subprocess.CompletedProcess:
    """``script`` run as a live trial's job: pinned to core 0, torch loaded on cores 0-1
    (``CLOUDOPT_LOAD_CORES``) and the probe reading ``content`` as its control file."""
    control = tmp_path / "probe-control.json"
    if isinstance(content, Path):
        control = content
    elif content is not None:
        control.write_bytes(content if isinstance(content, bytes) else content.encode())
    env = probe_environment(os.environ, tmp_path / "events.jsonl", control)
    env["CLOUDOPT_LOAD_CORES"] = "0,1"
    if not real_torch:
        (tmp_path / "fake" / "torch").mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / "torch" / "__init__.py").write_text(FAKE_TORCH)
        env["PYTHONPATH"] += os.pathsep + str(tmp_path / "fake")
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: os.sched_setaffinity(0, {0}))


needs_two_cores = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or not {0, 1} <= set(os.sched_getaffinity(0)),
    reason="needs cores 0 and 1 (the import widens the job from one core to two)")


@needs_two_cores
@pytest.mark.parametrize("shape", sorted(CONTROL_SHAPES))
def test_a_control_file_holding_anything_never_fails_import_torch(tmp_path, shape):
    out = _import_under(tmp_path, CONTROL_SHAPES[shape])
    assert out.returncode == 0, out.stderr[-2000:]
    # torch loaded, and the job is back on the core it was held on before the import
    assert out.stdout.strip() == "imported [0]", out.stdout + out.stderr[-2000:]


@needs_two_cores
@pytest.mark.parametrize("what", ["a folder", "missing"])
def test_an_unreadable_control_file_never_fails_import_torch(tmp_path, what):
    path = tmp_path / "control.d"
    if what == "a folder":
        path.mkdir()
    out = _import_under(tmp_path, path)
    assert out.returncode == 0 and out.stdout.strip() == "imported [0]", out.stderr[-2000:]


@needs_two_cores
def test_a_valid_order_during_the_import_is_followed(tmp_path):
    """The control is not just ignored: a well-formed order the controller wrote while torch
    loaded (a seq other than the one seen before, here NaN) puts the job on its cores."""
    out = _import_under(tmp_path, '{"seq": NaN, "cpus": [1]}')
    assert out.returncode == 0 and out.stdout.strip() == "imported [1]", out.stderr[-2000:]


TRAINS = """
import os, torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad(); model(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
print("trained", sorted(os.sched_getaffinity(0)))
"""


@needs_two_cores
def test_the_real_torch_trains_under_a_broken_control_file(tmp_path):
    out = _import_under(tmp_path, '{"seq": NaN, "cpus": [[0]], "num_threads": [2]}',
                        real_torch=True, script=TRAINS)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "trained [0]"
    assert read_probe(tmp_path / "events.jsonl").steps == 3

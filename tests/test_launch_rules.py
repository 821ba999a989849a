"""How a script is launched (issue 72): as it runs without a launcher unless it cannot, its
data-parallel workers measured only where two of them start on this machine's backend, and
trials that fail alike under one launcher stopping the baseline with the launcher to try."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace

from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.job import Job
from optimizer.search.after_loop.scaling import BackendFailed, ScalingSweep, backend_fallback
from optimizer.search.core.state import Proposal, SearchJob, SearchState, drive, sweep_row
from optimizer.trials.failures import failing_alike, no_usable_baseline
from optimizer.trials.launchers import launch_rule
from optimizer.trials.launchers.launch_rule import (
    backend_blocker,
    backend_error,
    decide_launch,
    launcher_requirement,
)
from optimizer.trials.records import TrialSummary

ROOT = Path(__file__).resolve().parents[1]

NANOGPT = '''
import os
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed import init_process_group, destroy_process_group
device = 'cuda'
backend = 'nccl' # 'nccl', 'gloo', etc.
ddp = int(os.environ.get('RANK', -1)) != -1 # is this a ddp run?
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ['RANK'])
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    ddp_world_size = int(os.environ['WORLD_SIZE'])
    device = f'cuda:{ddp_local_rank}'
    torch.cuda.set_device(device)
    master_process = ddp_rank == 0
else:
    master_process = True
model = torch.nn.Linear(4, 4)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])
'''

TORCHVISION = '''
import os
import torch

def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    elif "SLURM_PROCID" in os.environ:
        args.rank = int(os.environ["SLURM_PROCID"])
        args.gpu = args.rank % torch.cuda.device_count()
    elif hasattr(args, "rank"):
        pass
    else:
        print("Not using distributed mode")
        args.distributed = False
        return
    args.distributed = True
    torch.cuda.set_device(args.gpu)
    args.dist_backend = "nccl"
    torch.distributed.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                                         world_size=args.world_size, rank=args.rank)

def main(args):
    init_distributed_mode(args)
    model = torch.nn.Linear(2, 2)
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])

if __name__ == "__main__":
    main(None)
'''

ACCELERATE = '''
import os
import torch
from accelerate import Accelerator

local_rank = int(os.environ.get("LOCAL_RANK", -1))
accelerator = Accelerator()
model = torch.nn.Linear(2, 2)
model, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
if accelerator.is_main_process and local_rank in (-1, 0):
    print("main")
'''

UNGATED = '''
import os
import torch
local_rank = int(os.environ["LOCAL_RANK"])
torch.distributed.init_process_group("gloo")
'''


def _tree(source: str) -> ast.Module:
    return ast.parse(source)


# --- the static rule, on the shapes scripts come in ----------------------------------------

def test_nanogpt_runs_as_python_on_cpu_and_under_torchrun_where_nccl_starts():
    tree = _tree(NANOGPT)
    assert launcher_requirement(tree) is None  # every rank read is under `if ddp:`
    assert "NCCL" in backend_blocker(tree)  # through `backend = 'nccl'`
    on_cpu = decide_launch("auto", NANOGPT, cuda=False)
    assert (on_cpu.launcher, on_cpu.workers) == ("python", False)
    assert on_cpu.note.startswith("measured single-process") and "no CUDA" in on_cpu.note
    on_gpu = decide_launch("auto", NANOGPT, cuda=True)
    assert (on_gpu.launcher, on_gpu.workers, on_gpu.note) == ("torchrun", True, None)


def test_torchvision_reference_is_gated_and_needs_cuda_for_its_workers():
    tree = _tree(TORCHVISION)
    assert launcher_requirement(tree) is None  # `if "RANK" in os.environ and ...`
    assert backend_blocker(tree) is not None  # set_device(args.gpu), args.dist_backend = "nccl"
    assert decide_launch("auto", TORCHVISION, cuda=False).launcher == "python"
    assert decide_launch("auto", TORCHVISION, cuda=True).launcher == "torchrun"


def test_accelerate_script_runs_as_python():
    tree = _tree(ACCELERATE)
    assert launcher_requirement(tree) is None  # os.environ.get("LOCAL_RANK", -1) has a default
    assert backend_blocker(tree) is None
    for cuda in (False, True):  # it joins no process group itself: nothing to launch
        assert decide_launch("auto", ACCELERATE, cuda=cuda).launcher == "python"


def test_a_script_that_requires_local_rank_is_launched_by_torchrun():
    why = launcher_requirement(_tree(UNGATED))
    assert why is not None and "LOCAL_RANK" in why and "line 4" in why
    got = decide_launch("auto", UNGATED, cuda=False)
    assert (got.launcher, got.workers, got.note) == ("torchrun", True, None)
    # the same read under a guard, or with a default, needs no launcher
    for ok in ('import os\nif "LOCAL_RANK" in os.environ:\n    r = int(os.environ["LOCAL_RANK"])\n',
               'import os\nr = int(os.environ.get("LOCAL_RANK", 0))\n',
               'import os\ntry:\n    r = int(os.environ["RANK"])\nexcept KeyError:\n    r = 0\n'):
        assert launcher_requirement(_tree(ok)) is None, ok
        assert decide_launch("auto", ok, cuda=False).launcher == "python"


def test_a_backend_chosen_by_availability_keeps_the_workers():
    source = (ROOT / "examples" / "train_ddp.py").read_text()  # "nccl" if gpu else "gloo"
    assert backend_blocker(_tree(source)) is None
    got = decide_launch("auto", source, cuda=False)
    assert (got.launcher, got.workers) == ("torchrun", True)


def test_torchrun_asked_for_a_script_nccl_cannot_start_runs_single_process():
    got = decide_launch("torchrun", NANOGPT, cuda=False)
    assert (got.launcher, got.workers) == ("python", False) and "NCCL" in got.note
    assert decide_launch("python", UNGATED, cuda=False).launcher == "python"  # as asked
    required = UNGATED.replace('"gloo"', '"nccl"')  # cannot run without torchrun, nor 2 here
    got = decide_launch("torchrun", required, cuda=False)
    assert (got.launcher, got.workers) == ("torchrun", False) and "1 torchrun worker" in got.note


# --- trials that fail alike ----------------------------------------------------------------

TORCHRUN_NCCL = (
    "Traceback (most recent call last):\n  File \"/w/train.py\", line 9, in <module>\n"
    "    init_process_group(backend=backend)\n"
    "RuntimeError: Distributed package doesn't have NCCL built in\n"
    "E1128 12:00:01.000 torch/distributed/elastic/multiprocessing/api.py:874] failed\n"
    "Traceback (most recent call last):\n  File \"/venv/bin/torchrun\", line 8, in <module>\n"
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
    "  exitcode  : 1 (pid: 4242)\n")


def _failed(tid: str, stderr: str, reason: str = "crash", replicas: int = 1) -> TrialSummary:
    return TrialSummary(tid, "failed", Allocation(0, 2, 8.0, 32, replicas=replicas),
                        reason=reason, exit_code=1, stderr_tail=stderr)


def test_torchrun_trials_failing_alike_on_nccl_say_try_python():
    trials = [_failed("00-a", TORCHRUN_NCCL, "crash (rank 0 of 1 exited with code 1)"),
              _failed("01-b", TORCHRUN_NCCL, "crash (rank 0 of 1 exited with code 1)")]
    line = failing_alike(trials, "torchrun")
    assert line == ("2 of 2 trials under torchrun failed alike (RuntimeError: Distributed "
                    "package doesn't have NCCL built in): try --launcher python")
    assert failing_alike(trials[:1], "torchrun") is None  # one failure says nothing yet
    ok = TrialSummary("02-c", "completed", Allocation(0, 1, 4.0), throughput=10.0)
    assert failing_alike([*trials, ok], "torchrun") is None  # another allocation worked
    other = _failed("02-d", "Traceback\nValueError: bad shape\n")
    assert failing_alike([trials[0], other], "torchrun") is None  # not the same failure
    oom = [_failed(t, "Traceback\ntorch.OutOfMemoryError: CUDA out of memory\n")
           for t in ("a", "b")]
    assert failing_alike(oom, "python") is None  # a smaller batch may fit
    err = no_usable_baseline("train.py", trials, None, 60, 16.0, Path("/r"), "torchrun")
    assert str(err).splitlines()[1].strip() == line


def test_python_trials_stop_after_two_alike_and_say_try_torchrun(tmp_path, repo_root):
    script = tmp_path / "needs_rank.py"
    script.write_text('import os\nlocal_rank = int(os.environ["LOCAL_RANK"])\n'
                      'print("1000.0 samples/s")\n')
    out = tmp_path / "run"
    proc = run_main("--train-file", str(script), "--launcher", "python", "--baseline-samples",
                    "4", "--probe-seconds", "0", "--total-samples", "1000", "--output", str(out),
                    "--quiet", cwd=repo_root)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert ("2 of 2 trials under python failed alike (KeyError: 'LOCAL_RANK'): try --launcher "
            "torchrun") in proc.stderr
    ran = [d for d in (out / "trials").iterdir() if (d / "summary.json").is_file()]
    assert len(ran) == 2  # of the 4 planned: the other two would have failed alike


# --- a 2-worker trial failing on the backend at run time -----------------------------------

def test_a_backend_failure_of_two_workers_ends_the_workers_sweep():
    assert backend_error(TORCHRUN_NCCL).startswith("RuntimeError: Distributed package")
    assert backend_error("Traceback\nValueError: bad shape\n") is None
    one = TrialSummary("00-a", "completed", Allocation(0, 2, 8.0, 32), throughput=50.0)
    two = _failed("replicas-b", TORCHRUN_NCCL, "crash (rank 1 of 2 exited with code 1)", 2)
    assert backend_fallback([one]) is None
    note = backend_fallback([one, two])
    assert note.startswith("measured single-process: the 2-worker trial replicas-b failed "
                           "on the distributed backend (RuntimeError: Distributed package")
    stop = BackendFailed().check(SimpleNamespace(trials=[one, two]))
    assert BackendFailed().check(SimpleNamespace(trials=[one])) is None
    assert stop.why == note and stop.row is None and not stop.said  # the pipeline says it

    class Port:  # every 2-worker trial fails on the backend
        def measure(self, manager, alloc, prefix, run_dir, job, total):
            return _failed(f"{prefix}-{len(measured)}", TORCHRUN_NCCL, "crash", alloc.replicas)

        def label_batch(self, trial, trial_dir, settable):
            measured.append(trial)
            return trial

    measured: list[TrialSummary] = []
    sweep = ScalingSweep(SimpleNamespace(job=SimpleNamespace(spec=Job(Path("t.py"))), port=None))
    nxt = Proposal(Allocation(0, 4, 16.0, 32, replicas=2), "workers-scaling", "why",
                   prefix="replicas")
    sweep.queue = [nxt, nxt, nxt]
    state = SearchState(Port(), SearchJob(None, Path("run"), Job(Path("t.py"))), [one])
    new = drive(state, sweep, sweep_row, (BackendFailed(),))
    assert [t.trial_id for t in new] == ["replicas-0"] and measured == new  # then it stopped


# --- the main job on this CPU machine ------------------------------------------------------

GATED_NCCL = '''
"""A nanoGPT-shaped job: DDP over NCCL when torchrun starts it, else one process."""
import os
import time

import torch
from torch.distributed import destroy_process_group, init_process_group

backend = "nccl"
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend=backend)
    local_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{local_rank}"
    torch.cuda.set_device(device)
else:
    device = "cpu"
batch = int(os.environ.get("OPTIMIZER_BATCH_SIZE") or 32)
samples = 4096
print(f"batch_size={batch}", flush=True)
print(f"total_samples={samples}", flush=True)
torch.manual_seed(0)
model = torch.nn.Linear(16, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(batch, 16), torch.randn(batch, 1)
start, done = time.perf_counter(), 0
while done < samples:
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    done += batch
print(f"{done / (time.perf_counter() - start):.1f} samples/s", flush=True)
if ddp:
    destroy_process_group()
'''


def test_a_gated_nccl_script_is_measured_single_process_on_cpu(tmp_path, repo_root,
                                                               monkeypatch):
    monkeypatch.setattr(launch_rule, "cuda_available", lambda: False)  # as on this machine
    script = tmp_path / "gpt_like.py"
    script.write_text(GATED_NCCL)
    out = tmp_path / "run"
    proc = run_main("--train-file", str(script), "--launcher", "torchrun", "--workers-max", "2",
                    "--preference", "cost", "--baseline-samples", "2", "--budget", "2",
                    "--probe-seconds", "0", "--agent-seconds", "0.5", "--refine-rounds", "0",
                    "--runoff-rounds", "0", "--live-plan", "off", "--output", str(out),
                    "--quiet", cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads((out / "recommendation.json").read_text())
    (note,) = [n for n in rec["notes"] if n.startswith("measured single-process")]
    assert "NCCL" in note and "no CUDA" in note
    assert f"note: {note}" in proc.stdout
    assert rec["allocation"]["replicas"] == 1 and not rec.get("scaling")
    commands = [json.loads((d / "config.json").read_text())["command"]
                for d in (out / "trials").iterdir() if (d / "config.json").is_file()]
    assert commands and not any("torch.distributed.run" in c for c in commands)

"""Data-parallel trials: a script launched as its users launch it, ``torchrun`` with one process
per worker, and what its ranks leave behind.

A trial whose allocation has ``replicas`` workers runs ``python -m torch.distributed.run
--standalone --nproc-per-node=N`` in front of the usual command, in the trial's own session, so
that ending the trial ends every rank. The allocation's cores are split between the workers:
each rank pins itself to its share at start-up (``CLOUDOPT_RANK_CPUS``, read by the probe's
``sitecustomize`` before the script's first line) and runs that many intra-op threads. The
backend is the script's choice (gloo on CPU, NCCL on GPU, as ``examples/train_ddp.py`` does).

The probe runs in every rank (``CLOUDOPT_PROBE_RANKS``): rank 0 writes the trial's
``probe.jsonl``, rank ``r`` writes ``probe.rank{r}.jsonl`` beside it (:func:`rank_events_path`);
the reader sums samples over ranks at each of rank 0's steps
(:func:`optimizer.trials.probe.events.read_probe`). The launcher process itself records nothing.

A rank that dies ends the job (torchrun stops the others): :func:`rank_failure` reads the rank,
its exit code or signal, from torchrun's failure report, for a one-line reason.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

RANKS_VAR = "CLOUDOPT_PROBE_RANKS"
RANK_CPUS_VAR = "CLOUDOPT_RANK_CPUS"
DISTRIBUTED_MARKERS = re.compile(
    r"\binit_process_group\s*\(|[\"']LOCAL_RANK[\"']|\bDistributedDataParallel\b"
    r"|\bFullyShardedDataParallel\b|\bfully_shard\s*\(")
"""What marks a script as one that torchrun launches: it joins a process group, or reads the
rank torchrun gives it."""


def looks_distributed(source: str) -> bool:
    """Whether a script's source calls ``init_process_group``, reads ``LOCAL_RANK`` or wraps
    its model for data parallelism."""
    return bool(DISTRIBUTED_MARKERS.search(source))


def under_torchrun(launcher: str, replicas: int, required: bool) -> bool:
    """Whether a trial of ``replicas`` workers starts under torchrun: several always; one only
    where the script cannot run without it (``required``), else as plain python, the way its
    users run it on one process."""
    return launcher == "torchrun" and (int(replicas) > 1 or required)


def rank_events_path(path: str | os.PathLike, rank: int) -> Path:
    """Where rank ``rank`` writes its probe events: ``path`` itself for rank 0,
    ``probe.rank{r}.jsonl`` beside it for the others (the probe's site module names it the
    same way)."""
    p = Path(path)
    return p if int(rank) == 0 else p.with_name(f"{p.stem}.rank{int(rank)}{p.suffix}")


def rank_files(path: str | os.PathLike) -> list[Path]:
    """The other ranks' event files beside rank 0's ``path``, in rank order."""
    p = Path(path)
    found = []
    for f in p.parent.glob(f"{p.stem}.rank*{p.suffix}"):
        m = re.fullmatch(rf"{re.escape(p.stem)}\.rank(\d+){re.escape(p.suffix)}", f.name)
        if m:
            found.append((int(m.group(1)), f))
    return [f for _, f in sorted(found)]


def split_cores(cpus: Sequence[int], replicas: int) -> list[list[int]]:
    """The cores of each of ``replicas`` workers: contiguous, as even as the count allows
    (a worker never gets none: with fewer cores than workers they share round-robin)."""
    cpus, n = list(cpus), max(int(replicas), 1)
    if len(cpus) < n:
        return [[cpus[i % len(cpus)]] for i in range(n)] if cpus else [[] for _ in range(n)]
    base, extra = divmod(len(cpus), n)
    out, start = [], 0
    for i in range(n):
        size = base + (1 if i < extra else 0)
        out.append(cpus[start:start + size])
        start += size
    return out


def launch_command(cmd: Sequence[str], replicas: int) -> list[str]:
    """``cmd`` (an interpreter and its arguments) under torchrun with ``replicas`` local
    workers; a standalone rendezvous on a free local port, no restarts (a failed rank fails
    the trial)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={int(replicas)}", "--max-restarts=0", "--no-python", *cmd]


def launch_environment(env: Mapping[str, str], cpus: Sequence[int], replicas: int,
                       gpus: Sequence[int] = ()) -> dict[str, str]:
    """``env`` for a torchrun launch: each rank's cores and threads, the probe in every rank.

    GPUs stay as ``CUDA_VISIBLE_DEVICES`` lists them: the script picks its device from
    ``LOCAL_RANK``, as DDP scripts do."""
    groups = split_cores(cpus, replicas)
    out = dict(env)
    out[RANKS_VAR] = "1"
    out[RANK_CPUS_VAR] = ";".join(",".join(str(c) for c in g) for g in groups)
    threads = str(max(min(len(g) for g in groups), 1)) if groups else "1"
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        out[var] = threads
    return out


def rank_environment(rank: int, world: int, *, local_rank: int, local_world: int,
                     master_addr: str, master_port: int) -> dict[str, str]:
    """The variables torchrun gives a rank, for a launcher that starts ranks itself (a Ray
    Train worker): the script joins its process group from them as under torchrun."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_world), "GROUP_RANK": str(rank // max(local_world, 1)),
            "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port), RANKS_VAR: "1"}


_ROOT = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
_ANY = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank.*?\n\s*exitcode\s*:\s*(-?\d+)", re.S)


def rank_failure(stderr: str, world: int | None = None) -> str | None:
    """One line naming the rank whose failure ended the job, from torchrun's report
    (``rank 1 of 2 was killed by signal 9 (SIGKILL)``); None when there is no report."""
    m = _ROOT.search(stderr) or _ANY.search(stderr)
    if not m:
        return None
    rank, code = int(m.group(1)), int(m.group(2))
    of = f" of {world}" if world else ""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"rank {rank}{of} was killed by signal {-code} ({name})"
    return f"rank {rank}{of} exited with code {code}"


_GLOG = re.compile(r"^[WEIF]\d{4} ")  # torchrun's own log lines


def rank_stderr(stderr: str, lines: int = 3) -> str:
    """The last lines the ranks wrote to stderr before torchrun's own failure report (its
    traceback and log lines left out); "" when they wrote none."""
    head = stderr
    if "ChildFailedError" in stderr:
        cut = stderr.rfind("Traceback (most recent call last):")
        head = stderr[:cut] if cut >= 0 else stderr.split("ChildFailedError", 1)[0]
    keep = [ln.strip() for ln in head.splitlines() if ln.strip() and not _GLOG.match(ln)]
    return " | ".join(keep[-lines:])

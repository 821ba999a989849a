"""Why trials gave nothing usable, one line per cause, each with what to do about it; and
trials that fail alike under one launcher (:func:`failing_alike`), which stop the baseline
with the launcher to try instead."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from optimizer.foundation.errors import CloudoptError
from optimizer.trials.launchers.launch_rule import backend_error
from optimizer.trials.launchers.torchrun import rank_stderr
from optimizer.trials.oom_retry import OutgrewMemory, killed_for_memory, outgrew_message
from optimizer.trials.records import TrialSummary

STDERR_LINES = 3


def _cause(t: TrialSummary, probe_seconds: float | None, timeout_s: float) -> tuple[str, str]:
    """(cause key, the line for it) of one unusable trial."""
    reason = t.reason or ""
    if reason == "oom":
        return "oom", (f"killed at the {t.allocation.memory_gb:g} GB memory limit, peak "
                       f"{t.mem_gb_peak:.2f} GB: give more with --memory-max GB "
                       "([resources].memory_max) or lower the batch size")
    if reason == "timeout":
        return "timeout", (f"still running at the {timeout_s:g} s trial limit without a steady "
                           "rate: raise [run].trial_timeout_s")
    if reason == "infeasible":
        return "infeasible", (f"asked the Ray cluster for more than any node has "
                              f"({(t.stderr_tail or '').strip()}): lower [resources].cpu_count_max "
                              "/ gpu_count_max or add a larger node")
    if reason == "worker-lost":
        return "worker-lost", ("lost with the Ray worker or node that ran them (killed, or the "
                               "node died): see `ray status` and the raylet logs, then "
                               "--resume to measure them again")
    if reason == "executor-error":
        last = (t.stderr_tail or "").strip().splitlines()[-1:] or ["no message"]
        return "executor-error", (f"could not start on the Ray worker ({last[0]}): check that "
                                  "cloudopt is installed on the cluster's nodes")
    if reason.startswith("crash (rank "):  # a data-parallel rank died; torchrun ended the rest
        last = rank_stderr(t.stderr_tail or "") or "the ranks wrote nothing there"
        return f"crash:{reason}", f"crashed: {reason[7:-1]}; last lines of stderr: {last}"
    if reason.startswith("crash"):
        tail = [ln for ln in (t.stderr_tail or "").strip().splitlines() if ln.strip()]
        last = " | ".join(tail[-STDERR_LINES:]) or "stderr was empty"
        code = f"exit code {t.exit_code}" if t.exit_code is not None else reason
        return f"crash:{last}", f"crashed ({code}); last lines of stderr: {last}"
    if t.status == "probe":
        longer = 3 * probe_seconds if probe_seconds else 60
        return "no-rate-probe", (f"printed no throughput within the {probe_seconds:g} s probe: "
                                 f"use --probe-seconds {longer:g}, or have it print "
                                 "'N samples/s' lines or rows to $OPTIMIZER_METRICS_CSV")
    return "no-rate", ("ran to its end without a throughput: print 'N samples/s' lines, a "
                       "'total_samples=N' line, or rows to $OPTIMIZER_METRICS_CSV, or give "
                       "--total-samples")


def cause_of(trial: TrialSummary, probe_seconds: float | None, timeout_s: float) -> str:
    """Why one trial gave nothing usable, with what to do (``crashed (exit code 1); ...``)."""
    return _cause(trial, probe_seconds, timeout_s)[1]


def explain_unusable(trials: Sequence[TrialSummary], probe_seconds: float | None,
                     timeout_s: float) -> list[str]:
    """One line per distinct cause among trials without a throughput, e.g. ``3 of 4 trials
    printed no throughput within the 5 s probe: use --probe-seconds 15``."""
    groups: dict[str, list[TrialSummary]] = defaultdict(list)
    lines: dict[str, str] = {}
    for t in trials:
        if t.ok and t.throughput:
            continue
        key, line = _cause(t, probe_seconds, timeout_s)
        groups[key].append(t)
        lines.setdefault(key, line)
    out = []
    for key, members in groups.items():
        names = ", ".join(m.trial_id for m in members)
        out.append(f"{len(members)} of {len(trials)} trials ({names}) {lines[key]}")
    return out


_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::.*)?$")
_MEMORY = re.compile(r"out of memory|MemoryError", re.I)
_NO_RANK = re.compile(r"KeyError: '(?:LOCAL_RANK|RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|MASTER_ADDR|"
                      r"MASTER_PORT)'|environment variable \w+ expected, but not set|"
                      r"Default process group has not been initialized")
_DISTRIBUTED = re.compile(r"torch\.distributed|c10d|rendezvous|process group|ProcessGroup",
                          re.I)


def error_line(stderr: str) -> str | None:
    """The exception a crashed script ended on (``KeyError: 'LOCAL_RANK'``), the ranks' own
    under torchrun (its failure report left out); None where stderr names none."""
    text = stderr or ""
    if "ChildFailedError" in text:
        cut = text.rfind("Traceback (most recent call last):")
        text = text[:cut] if cut >= 0 else text.split("ChildFailedError", 1)[0]
    for line in reversed(text.splitlines()):
        if _ERROR_LINE.match(line):
            return line.strip()
    return None


def failing_alike(trials: Sequence[TrialSummary], launcher: str, at_least: int = 2) -> str | None:
    """One line when at least ``at_least`` trials ran, none usable, and all crashed on the same
    exception (not out of memory, which another allocation may escape): the rest would fail
    alike. It names the launcher to try where the exception is the launcher's: a process group
    or device that cannot start on this backend under torchrun (try python), a rank variable
    or process group missing under python (try torchrun). None otherwise."""
    if len(trials) < at_least or any(t.ok and t.throughput for t in trials):
        return None
    if not all((t.reason or "").startswith("crash") for t in trials):
        return None
    errors = {error_line(t.stderr_tail or "") for t in trials}
    if len(errors) != 1 or None in errors:
        return None
    error = errors.pop()
    if _MEMORY.search(error):
        return None
    tails = " ".join(t.stderr_tail or "" for t in trials)
    other = None
    if launcher == "torchrun" and (backend_error(tails) or _DISTRIBUTED.search(error)):
        other = "python"
    elif launcher != "torchrun" and _NO_RANK.search(tails):
        other = "torchrun"
    line = f"{len(trials)} of {len(trials)} trials under {launcher} failed alike ({error})"
    return f"{line}: try --launcher {other}" if other else line


__all__ = ["cause_of", "error_line", "explain_unusable", "failing_alike"]


def no_usable_baseline(train_file: str, baseline: Sequence[TrialSummary],
                       probe_seconds: float | None, timeout_s: float, memory_max: float,
                       run_dir: Path, launcher: str = "python") -> CloudoptError:
    """The error for a baseline without a usable trial: :class:`OutgrewMemory` when every
    trial was killed at the largest memory limit on offer, else one line per cause, after the
    launcher to try where the trials failed alike under ``launcher`` (:func:`failing_alike`)."""
    if baseline and all(killed_for_memory(t) and t.allocation.memory_gb >= memory_max
                        for t in baseline):
        return OutgrewMemory(outgrew_message(train_file, list(baseline), memory_max, run_dir))
    alike = failing_alike(baseline, launcher)
    return CloudoptError(f"{train_file}: no baseline trial produced a throughput:\n  "
                         + "\n  ".join(([alike] if alike else [])
                                       + explain_unusable(baseline, probe_seconds, timeout_s))
                         + f"\n  (trial records: {run_dir / 'trials'})")

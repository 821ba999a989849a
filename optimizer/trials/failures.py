"""Why trials gave nothing usable, one line per cause, each with what to do about it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from optimizer.foundation.errors import CloudoptError
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


__all__ = ["cause_of", "explain_unusable"]


def no_usable_baseline(train_file: str, baseline: Sequence[TrialSummary],
                       probe_seconds: float | None, timeout_s: float, memory_max: float,
                       run_dir: Path) -> CloudoptError:
    """The error for a baseline without a usable trial: :class:`OutgrewMemory` when every
    trial was killed at the largest memory limit on offer, else one line per cause."""
    if baseline and all(killed_for_memory(t) and t.allocation.memory_gb >= memory_max
                        for t in baseline):
        return OutgrewMemory(outgrew_message(train_file, list(baseline), memory_max, run_dir))
    return CloudoptError(f"{train_file}: no baseline trial produced a throughput:\n  "
                         + "\n  ".join(explain_unusable(baseline, probe_seconds, timeout_s))
                         + f"\n  (trial records: {run_dir / 'trials'})")

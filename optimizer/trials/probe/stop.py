"""When a probe stops: its time box, later for a script still starting, and never short of
a job end a few seconds away (:func:`box_end`, :func:`near_end`). The runner asks these at every
poll (:func:`optimizer.trials.runner.wait_trial`)."""

from __future__ import annotations

from typing import Protocol

from optimizer.trials.output import RateTracker


class TrialRun(Protocol):
    """What these rules read of a :class:`optimizer.trials.runner.TrialRun` (named here without
    importing the runner, which imports this module)."""

    rates_csv: RateTracker
    rates_probe: RateTracker
    rates_stdout: RateTracker
    probe_first_step_s: float | None
    probe_torch: bool
    probe_last: tuple[float, float] | None
    job_samples: float | None

STARTUP_BOXES = 3
"""A probe whose script is still starting when its time box ends (its first training step not
yet measured: a ``torch.compile``, a data set loaded) runs on to this many boxes: stopped there
it measured nothing, and the search measured the same setting again, four times (compiled's
start-up is 17-21 s on one core against a 20 s box)."""

MEASURE_AFTER_STARTUP = 0.25
"""Such a probe then runs this share of a box past its first training step or rate window,
whichever came first, and at least :data:`MEASURE_MIN_S`: enough windows for a rate (the steady
check may end it sooner)."""

MEASURE_MIN_S = 2.0
"""Two of the in-process probe's rate windows (``PROBE_WINDOW_S``)."""


def box_end(run: TrialRun, probe_seconds: float, timeout_s: float) -> float:
    """Seconds after launch at which a probe is stopped: its time box, or later where the
    in-process probe saw torch imported and no training step by then, or the first rate came late
    (:data:`STARTUP_BOXES`, :data:`MEASURE_AFTER_STARTUP`); never past the hard limit."""
    firsts = [r.windows[0][0] for r in (run.rates_csv, run.rates_probe, run.rates_stdout)
              if r.windows]
    if run.probe_first_step_s is not None:
        firsts.append(run.probe_first_step_s)
    cap = min(STARTUP_BOXES * probe_seconds, timeout_s)
    if firsts:
        more = max(MEASURE_AFTER_STARTUP * probe_seconds, MEASURE_MIN_S)
        return max(probe_seconds, min(min(firsts) + more, cap))
    # only a torch script the probe is inside is known to be starting; another may simply be
    # one whose steps the probe cannot see (it prints nothing, sleeps, hangs)
    return cap if run.probe_torch else probe_seconds


NEAR_END = 0.25
"""A probe past ``1 - NEAR_END`` of its job's samples runs to its end: finishing costs at most
a third of what it ran, and a whole run shows where the job ends (its printed held-out loss;
sgd_no_loader's batch-32 probes were stopped at 90% of the job, and a batch that ends worse
was recommended)."""


NEAR_END_TIME = 1 / 3
"""A probe whose job's remaining samples, at its measured rate, would take at most this share
of the time it has run also runs to its end (the same bound on the cost of finishing): where
start-up took most of the box, the probe stopped with half the samples done and a few seconds
left, and no probe saw what the job does after its last step (compiled's final evaluation
compiles an inference graph: whole runs took 36 s, the probes claimed 30 s)."""


def near_end(run: TrialRun, elapsed: float | None = None) -> bool:
    """Whether the probe has done most of a job whose size an earlier run counted: most of
    its samples, or (``elapsed`` seconds in) all but what its rate finishes in a third of
    that time."""
    done = run.probe_last[1] if run.probe_last else None
    if not (run.job_samples and done):
        return False
    if done >= (1 - NEAR_END) * run.job_samples:
        return True
    rate = run.rates_probe.throughput() if elapsed else None
    return bool(elapsed and rate and rate > 0
                and (run.job_samples - done) / rate <= NEAR_END_TIME * elapsed)

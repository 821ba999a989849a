"""How trials are run and recorded, and how far the search goes (``[run]``)."""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.foundation.errors import check as _check


@dataclass
class RunConfig:
    """How trials are run and recorded."""

    baseline_samples: int = 4
    """Configurations measured for real before the agents are trained."""
    probe_seconds: float = 20.0
    """Time box of one trial; a script still running then is stopped and recorded as a probe."""
    in_process_probe: bool = True
    """Load cloudopt's probe into each trial's Python process (``optimizer.trials.probe``):
    optimizer steps, samples, epochs, loss and stages of an unmodified PyTorch script."""
    trial_timeout_s: float = 600.0
    """Hard limit of one trial: a script past it is a failed trial (timeout)."""
    monitor_interval: float = 0.5
    """Seconds between samples of the process tree."""
    output_dir: str = "runs"
    seed: int = 0
    agent_seconds: float = 25.0
    """Training budget of each agent in the main job, seconds (half of it in later rounds)."""
    agent_episodes: int = 0
    """0: the agents train for ``agent_seconds``; N: for N episodes each whatever the time
    (half in later rounds), so that a seeded run, a replayed one, repeats exactly."""
    refine_rounds: int = 3
    """Closed-loop rounds after the baseline: each measures one allocation (the agents' plan,
    or the one with the largest expected improvement), refits and re-plans; 0 measures the
    first plan only."""
    runoff_rounds: int = 3
    """Rounds of the closing run-off, in which the settings that measured close are run again
    back to back (``search/after_loop/runoff.py``); a contender separated from the leader after two
    leaves. 0 skips the run-off: the final choice is then made over all trials as measured."""
    runoff_size: int = 3
    """At most this many settings (the best ones) go to the run-off."""
    budget: int | str = 12
    """Real runs the whole search may make (probes, whole runs, rounds, sweeps, run-off); 0: no
    limit; ``"auto"``: as many as cost at most ``budget_share`` of the job (``search/budget.py``)."""
    budget_share: float = 0.10
    goodput: bool = True
    """Batch sizes by goodput (samples/s x measured efficiency); false: samples/s alone."""
    job_runs: int = 100
    """Runs of the job the recommendation will serve: a closed-loop run whose expected saving
    over them is less than the run costs is not made (``search/loop/stop_rules.py``; 0: off)."""
    refine_tolerance: float = 0.10
    """Prediction and measurement agree when their throughputs differ by at most this share;
    agreement on the best measured allocation ends the loop early."""
    sla_from_baseline: bool = True
    """Set the time and cost limits not given on the command line from the baseline trials
    (their forecast + 25%), so the reward weighs allocations against this job's own scale."""
    executor: str = "local"
    """Where trials run: ``local`` (subprocesses, one after another) or ``ray`` (Ray tasks,
    side by side where they fit; ``pip install 'cloudopt[ray]'``)."""
    ray_address: str = ""
    """With ``executor = "ray"``: the cluster to join (``auto``, ``ray://head:10001``); empty
    starts a local Ray sized to this machine."""

    def __post_init__(self) -> None:
        _check(isinstance(self.baseline_samples, int) and self.baseline_samples >= 1,
               "[run].baseline_samples", "must be a positive integer", self.baseline_samples)
        for name in ("refine_rounds", "runoff_rounds", "job_runs", "agent_episodes"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 0, f"[run].{name}", "must be a whole number >= 0", v)
        _check(self.budget == "auto" or (isinstance(self.budget, int) and self.budget >= 0),
               "[run].budget", 'must be a whole number >= 0 or "auto"', self.budget)
        _check(isinstance(self.goodput, bool), "[run].goodput", "must be a boolean", self.goodput)
        _check(isinstance(self.budget_share, (int, float)) and 0 < self.budget_share <= 10,
               "[run].budget_share", "must be a share > 0 (0.1 = 10%)", self.budget_share)
        _check(isinstance(self.runoff_size, int) and self.runoff_size >= 2,
               "[run].runoff_size", "must be a whole number >= 2", self.runoff_size)
        _check(isinstance(self.refine_tolerance, (int, float)) and self.refine_tolerance > 0,
               "[run].refine_tolerance", "must be a positive share", self.refine_tolerance)
        _check(self.executor in ("local", "ray") or str(self.executor).startswith("replay:"),
               "[run].executor", 'must be "local", "ray" or "replay:DIR"', self.executor)
        _check(isinstance(self.ray_address, str), "[run].ray_address", "must be a string",
               self.ray_address)
        for name in ("probe_seconds", "trial_timeout_s", "monitor_interval", "agent_seconds"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"[run].{name}", "must be > 0", v)


__all__ = ["RunConfig"]

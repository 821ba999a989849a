"""What one trial is asked to be: an allocation, a folder, and how it is run and measured.

Every way of running a trial takes this one request: the manager's
:meth:`~optimizer.trials.training.TrainingModuleManager.run_training`, each executor
(:mod:`optimizer.trials.executors`, a batch of them), the pipeline and the search. It is
frozen: an executor that passes a job size found by one trial on to the next makes a new
request (``dataclasses.replace``), so a request never changes under a trial that holds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from optimizer.foundation.allocation import Allocation
from optimizer.trials.probe.loss_target import LossTarget

if TYPE_CHECKING:
    from optimizer.trials.live.session import LiveSetup


@dataclass(frozen=True)
class TrialRequest:
    """One trial to run: the script under ``allocation``, recorded in ``trial_dir``.

    Parameters
    ----------
    allocation : Allocation
        GPUs, CPUs (pinned cores), memory limit (GiB, enforced) and batch size.
    trial_dir : path
        Folder of this trial (created; files replaced atomically; ``summary.json`` last).
    probe_seconds : float, optional
        Time box: stop once throughput is steady or this many seconds pass, and record a
        ``probe`` with the predicted whole-job time. None: run to the end.
    timeout_s : float
        Hard limit; a script still running then is a failed trial (``timeout``).
    monitor_interval : float
        Seconds between resource samples.
    total_samples : float, optional
        Work of the whole job; otherwise taken from the script's metrics, output
        (``total_samples=N``) or arguments (``--samples`` × ``--epochs``).
    live : LiveSetup, optional
        A controller that changes the allocation while the script runs
        (:mod:`optimizer.trials.live`); the cost is then billed per interval at what it held.
    until_box : bool
        A probe that runs its whole time box, steady or not: the script's own batch's, whose
        loss the probes of other batches train to (:mod:`optimizer.trials.probe.loss_target`).
    loss_target : LossTarget, optional
        A probe of another batch than the script's runs on until it has trained as far.
    quiet : bool
        False: echo the script's output lines.
    trial_id : str, optional
        Default: the folder's name.
    visible_devices : sequence of int, optional
        GPUs to choose from (default: those NVML sees).
    cpu_ids : sequence of int, optional
        The cores to pin to (an executor running trials side by side leases them, see
        :mod:`optimizer.trials.core_lease`); default: the first ``allocation.cpus`` of this
        process's affinity mask.
    steady_windows, steady_tol : int, float
        A probe is steady once at least ``steady_windows`` rate windows after the first give
        their mean a relative standard error of at most ``steady_tol``.
    rank_env : mapping, optional
        This run is one rank of a data-parallel job whose ranks another launcher starts (a Ray
        Train worker): torchrun's variables for it
        (:func:`~optimizer.trials.launchers.torchrun.rank_environment`).
    """

    allocation: Allocation
    trial_dir: Path
    probe_seconds: float | None = None
    timeout_s: float = 600.0
    monitor_interval: float = 0.5
    total_samples: float | None = None
    live: LiveSetup | None = None
    until_box: bool = False
    loss_target: LossTarget | None = None
    quiet: bool = True
    trial_id: str | None = None
    visible_devices: Sequence[int] | None = None
    cpu_ids: Sequence[int] | None = None
    steady_windows: int = 4
    steady_tol: float = 0.03
    rank_env: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        # Frozen all the way down where it is cheap: lists given by callers become tuples.
        object.__setattr__(self, "trial_dir", Path(self.trial_dir))
        for name in ("visible_devices", "cpu_ids"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(int(v) for v in value))
        if self.rank_env is not None:
            object.__setattr__(self, "rank_env", dict(self.rank_env))

    @property
    def name(self) -> str:
        """The trial's id: ``trial_id``, else its folder's name."""
        return self.trial_id or self.trial_dir.name


__all__ = ["TrialRequest"]

"""What the command line says about one optimization besides the configuration: the script's
arguments, how its batch size, workers, learning rate and epochs are set, the probe's time box,
the job's size where given, and the outputs' options. The stages receive it as ``opts``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class JobOptions:
    """What the command line says about one optimization besides the configuration."""

    train_args: str | Sequence[str] = ""
    batch_size_arg: str | None = None
    batch_size_env: str | None = None
    workers_arg: str | None = None
    """The flag that sets the script's data-loader workers (None: they are not varied)."""
    lr_arg: str | None = None
    """The flag that sets the script's learning rate (None: it is never changed)."""
    epochs_arg: str | None = None
    """The flag that sets the job's epochs (None: the usual names; see ``job_length``)."""
    probe_seconds: float | None = None
    """None: the configuration's; 0: every trial runs to its end."""
    total_samples: float | None = None
    dataset_path: str | None = None
    offline_logs: str | None = None
    phase_model: str | None = None
    sla_given: frozenset[str] = frozenset()
    """SLA limits the user set explicitly; the others may be derived from the baseline."""
    agent_seconds: float | None = None
    """Training budget of each agent (default: the configuration's)."""
    image: str | None = None
    """Container image of the Kubernetes Job (default: a placeholder)."""
    launcher: str | None = None
    """``torchrun``: a data-parallel script, one process per worker; ``python``; None: found
    from the script (:func:`optimizer.trials.launchers.torchrun.looks_distributed`)."""
    workers_max: int = 1
    """The most data-parallel workers a torchrun trial runs (``--workers-max``)."""
    live_plan: str = "measure"
    """``measure``: the per-stage live plan written and run beside the static one; ``write``:
    written only; ``off``."""

"""How a trial's script is started: its command line for an allocation, the settings a trial
sets and the variable that carries its batch (:mod:`~optimizer.trials.launchers.plan`), as
``python script.py`` or, for a data-parallel job, under ``torchrun`` with one process per worker
(:mod:`~optimizer.trials.launchers.torchrun`); which of the two ``--launcher auto`` takes, and
whether the workers can start here (:mod:`~optimizer.trials.launchers.launch_rule`)."""

LAUNCHERS = ("python", "torchrun")

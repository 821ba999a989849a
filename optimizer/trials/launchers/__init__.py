"""How a trial's script is started: as ``python script.py`` (:func:`optimizer.trials.runner.build_command`)
or, for a data-parallel job, under ``torchrun`` with one process per worker
(:mod:`~optimizer.trials.launchers.torchrun`); which of the two ``--launcher auto`` takes, and
whether the workers can start here (:mod:`~optimizer.trials.launchers.launch_rule`)."""

LAUNCHERS = ("python", "torchrun")

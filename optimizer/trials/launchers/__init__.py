"""How a trial's script is started: as ``python script.py`` (:func:`optimizer.trials.runner.build_command`)
or, for a data-parallel job, under ``torchrun`` with one process per worker
(:mod:`~optimizer.trials.launchers.torchrun`)."""

LAUNCHERS = ("python", "torchrun")

"""One trial: a user's script run for real under an allocation, monitored, measured, recorded.

:class:`~optimizer.trials.training.TrainingModuleManager` is the door: it reads the script
(:mod:`~optimizer.trials.script_scan`), turns the allocation into an environment and CPU affinity
(:mod:`~optimizer.trials.resources`), launches and time-boxes the run
(:mod:`~optimizer.trials.runner`) under a :class:`~optimizer.trials.monitor.ProcessMonitor`,
reads what the script reports (:mod:`~optimizer.trials.output`, :mod:`~optimizer.trials.batch`)
and prices it (:mod:`~optimizer.trials.cost`). The run's files and its summary are the records
(:mod:`~optimizer.trials.records`) every later stage reads. Also here: the guard that no script
outlives the optimizer (:mod:`~optimizer.trials.guard`), core leases and the executors that place
trials (:mod:`~optimizer.trials.executors`: local or Ray), SLA checks, why trials failed, and the
phase profile of a measured trace.

May import the foundation, the libraries (``phases`` for the phase profile) and itself; never
:mod:`optimizer.search`, :mod:`optimizer.reports` or :mod:`optimizer.offline`: a trial is
measured the same whoever asked for it.
"""

"""The search: which allocations to measure, what the measurements say, and the choice.

In the order the main job uses it: the baseline probes (:mod:`~optimizer.search.baseline`), the
workload model fitted to the trials (:mod:`~optimizer.search.workload_fit`,
:mod:`~optimizer.search.calibrate` for presets), one round of planning with the agents
(:mod:`~optimizer.search.planning` over :mod:`~optimizer.search.recommend`, reused through
:mod:`~optimizer.search.plan_cache`), the closed loop (:mod:`~optimizer.search.loop.rounds`, its parts
in :mod:`~optimizer.search.loop`: the pipeline's typed port, the proposers, the stop rules and
the final choice) with its expected-improvement probes (:mod:`~optimizer.search.acquisition`),
the data-loader workers sweep (:mod:`~optimizer.search.after_loop.workers`), the run-off of close
settings (:mod:`~optimizer.search.after_loop.runoff`) and the choice among measured trials with its
right-sized memory (:mod:`~optimizer.search.choice`). Batch sizes are compared by goodput, their statistical
efficiency measured on the script (:mod:`~optimizer.search.goodput`).

May import the foundation, :mod:`optimizer.trials` (it runs trials and reads their records) and
the libraries ``envs`` and ``agents``; never :mod:`optimizer.reports`: what is chosen does not
depend on how it is shown.
"""

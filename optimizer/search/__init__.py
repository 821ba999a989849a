"""The search: which allocations to measure, what the measurements say, and the choice.

In the order the main job uses it: the baseline probes (:mod:`~optimizer.search.baseline`),
then the search's stages, listed in order in :mod:`~optimizer.search.stages`: the closed loop
(:mod:`~optimizer.search.loop`: fit the workload model, :mod:`~optimizer.search.workload_fit`;
plan one round with the agents, :mod:`~optimizer.search.planning` over
:mod:`~optimizer.search.recommend`, reused through :mod:`~optimizer.search.plan_cache`; probe by
expected improvement, :mod:`~optimizer.search.expected` over
:mod:`~optimizer.search.acquisition`), and after it (:mod:`~optimizer.search.after_loop`) the
data-loader and data-parallel workers sweeps, the run-off of close settings, the choice among
measured trials with its right-sized memory (:mod:`~optimizer.search.choice`), the learning
rate and the live round. Batch sizes are compared by goodput, their statistical efficiency
measured on the script (:mod:`~optimizer.search.goodput`); :mod:`~optimizer.search.calibrate`
measures presets. The stages speak one vocabulary, :mod:`~optimizer.search.core`, and the
modules stand in layers that import only downwards (ARCHITECTURE.md); the main job's trials are
measured through :mod:`~optimizer.search.trial_port`, the port the stages are handed.

May import the foundation, :mod:`optimizer.trials` (it runs trials and reads their records) and
the libraries ``envs`` and ``agents``; never :mod:`optimizer.reports`: what is chosen does not
depend on how it is shown.
"""

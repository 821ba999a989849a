"""The search's stages after the closed loop, one module each, in the order
:func:`optimizer.search.stages.stages` runs them: the trials an earlier run measured
(:mod:`~optimizer.search.after_loop.earlier`), the data-loader workers sweep
(:mod:`~optimizer.search.after_loop.workers`), the data-parallel workers sweep
(:mod:`~optimizer.search.after_loop.scaling`), the run-off
(:mod:`~optimizer.search.after_loop.runoff`), the final choice
(:mod:`~optimizer.search.after_loop.final_choice`), the learning rate
(:mod:`~optimizer.search.after_loop.learning_rate`) and the live round
(:mod:`~optimizer.search.after_loop.live_round`); then the recommendation they add up to
(:mod:`~optimizer.search.after_loop.recommendation`).
"""

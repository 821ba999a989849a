"""Goodput: batch sizes compared by the time and cost to the same training progress.

Statistical efficiency measured on the user's script (:mod:`~optimizer.search.goodput.efficiency`:
the gradient noise scale as the prior, the samples to a common loss of
:mod:`~optimizer.search.goodput.common_loss` to correct it), the loss a probe of another batch
trains to (:mod:`~optimizer.search.goodput.probe_target`), and the learning rate to go with a
recommended batch (:mod:`~optimizer.search.after_loop.learning_rate`).
"""

"""Evaluating autoscaling policies on held-out traces (the AI4DL experiment, and ours).

:func:`~phases.evaluation.evaluate.evaluate_file` replays each policy of :mod:`phases.policies`
over executions it did not see (:mod:`~phases.evaluation.data`: splits, leave one workload out,
cold starts), with the phases a detector gives them (:mod:`~phases.evaluation.phase_labels`),
scores over- and under-provisioning (:mod:`~phases.evaluation.metrics`) and writes the tables and
plots (:mod:`~phases.evaluation.report`, :mod:`~phases.evaluation.plots`). It may import the rest
of ``phases`` and the foundation; nothing in ``phases`` outside this folder imports it.
"""

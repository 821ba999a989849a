"""What the user receives: the run report, the recommendation's files, Kubernetes resources.

:mod:`~optimizer.reports.render` renders a report's blocks as Markdown and as one self-contained
HTML page; :mod:`~optimizer.reports.run_report` writes the main job's outputs (metric CSVs,
``recommendation.json``, plots, ``report.md``/``.html``); :mod:`~optimizer.reports.k8s` the
container resources and the Job.

Reports read records: they may import the foundation, :mod:`optimizer.trials` (records, SLA
checks, phase profiles, the environment an allocation gets) and ``phases``/``agents`` for their
outputs, never :mod:`optimizer.search`: what a report shows was decided before it is written and
reaches it as data.
"""

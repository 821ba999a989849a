"""Offline analysis: logs of earlier training runs in, resource predictions and reports out.

:class:`~optimizer.offline.analyzer.OfflineDataAnalyzer` is the door. Logs and run history are
read into canonical run records (:mod:`~optimizer.offline.logs`,
:mod:`~optimizer.offline.history_rows`), described by log-space features
(:mod:`~optimizer.offline.features`), modelled (:mod:`~optimizer.offline.models`, with intervals
and peak memory in :mod:`~optimizer.offline.intervals`, evaluated leave-one-out in
:mod:`~optimizer.offline.evaluation`), and a job's configuration is chosen among measured
candidates (:mod:`~optimizer.offline.candidates`, :mod:`~optimizer.offline.scoring`) or sized by
heuristics when nothing resembles it (:mod:`~optimizer.offline.sizing`); each recurring job's
next run is right-sized (:mod:`~optimizer.offline.requests`); :mod:`~optimizer.offline.report`
writes the analysis.

May import the foundation, :mod:`optimizer.history` (runs read from any store),
:mod:`optimizer.trials.records` (a trial's summary is a log row too) and
:mod:`optimizer.reports.render` (the page it writes); nothing of the search.
"""

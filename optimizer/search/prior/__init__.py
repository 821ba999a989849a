"""A search that starts from history: earlier runs of the script as prior measurements.

:mod:`~optimizer.search.prior.match` says which runs are this script's and usable (and why the
others are not); :mod:`~optimizer.search.prior.measurements` makes them trial records the search
fits and ranks like its own, which no budget counts; :mod:`~optimizer.search.prior.seed` holds
what the pipeline asks of them (settings covered, the reference, the report's lines);
:mod:`~optimizer.search.prior.confirm` ends such a search with one real run of its leader.
"""

"""The search's vocabulary, which every stage speaks and nothing of it imports from above.

:mod:`~optimizer.search.core.port`: what the search needs from the pipeline that runs it
(:class:`~optimizer.search.core.port.SearchPort`); :mod:`~optimizer.search.core.state`: the job,
the state every stage reads and writes, a proposal, a proposer, a stop rule and its reason, a
stage, and :func:`~optimizer.search.core.state.drive`, which measures what a proposer proposes;
:mod:`~optimizer.search.core.outcome`: what the search hands back.
"""

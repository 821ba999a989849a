"""The closed loop in parts one can read and replace.

:mod:`~optimizer.search.core.port` holds what the search needs from the pipeline that runs it
(:class:`~optimizer.search.core.port.SearchPort`); :mod:`~optimizer.search.core.state` the
job, the state every part reads and writes, the proposal and the stop reason;
:mod:`~optimizer.search.loop.proposers` the ways of choosing the next trial (each one a class
with ``propose(state)``); :mod:`~optimizer.search.loop.stop_rules` the rules that end the loop
(each one a class with ``check(state)``); :mod:`~optimizer.search.expected` what the
fitted model expects of the settings not measured yet; :mod:`~optimizer.search.after_loop.recommendation`
what happens after the loop, down to the final choice, whose result
:mod:`~optimizer.search.core.outcome` holds. The controller that loops over them is
:func:`optimizer.search.loop.rounds.refine`.
"""

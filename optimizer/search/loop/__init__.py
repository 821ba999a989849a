"""The closed loop, the search's first stage, in parts one can read and replace.

:mod:`~optimizer.search.loop.rounds` holds the controller
(:class:`~optimizer.search.loop.rounds.ClosedLoop`: round after round, plan, ask the
proposers, check the stop rules, measure);
:mod:`~optimizer.search.loop.proposers` the ways of choosing the next trial (each one a class
with ``propose(state)``); :mod:`~optimizer.search.loop.stop_rules` the rules that end the loop
(each one a class with ``check(state)``). They speak the search's vocabulary
(:mod:`optimizer.search.core`) and read what the fitted model expects of the settings not
measured yet (:mod:`optimizer.search.expected`); the stages after the loop are in
:mod:`optimizer.search.after_loop`, and :mod:`optimizer.search.stages` orders them all.
"""

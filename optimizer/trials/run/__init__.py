"""One trial, end to end: what is asked (:mod:`~optimizer.trials.run.request`), the command
line, environment and cores it is launched with (:mod:`~optimizer.trials.run.launch`), the
steps from an empty folder to a recorded summary (:mod:`~optimizer.trials.run.trial`) and what
a finished run amounts to (:mod:`~optimizer.trials.run.summary`). The process itself (launch,
time box, outcome, files) is :mod:`optimizer.trials.runner`'s."""

"""The search's vocabulary: the port to the pipeline, the state, proposals, stop rules, the outcome."""

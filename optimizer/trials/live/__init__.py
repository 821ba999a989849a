"""A trial changed while it runs: the actuators a live controller drives."""

from optimizer.trials.live.actuators import (
    CHANGES_FILE,
    Change,
    LiveTrial,
    read_changes,
    set_tree_affinity,
    tree_tasks,
)

__all__ = ["CHANGES_FILE", "Change", "LiveTrial", "read_changes", "set_tree_affinity",
           "tree_tasks"]

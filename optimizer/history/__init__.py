"""History of training runs from where teams keep it: one form (:mod:`.run`), one reader per
store."""

from optimizer.history.run import OUTCOME_KEYS, PARAM_KEYS, History, HistoryRun, UsageSeries

__all__ = ["OUTCOME_KEYS", "PARAM_KEYS", "History", "HistoryRun", "UsageSeries"]

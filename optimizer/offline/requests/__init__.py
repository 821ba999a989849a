"""Right-sized requests for the next run of each recurring job, from its history.

cloudopt's (:mod:`.cloudopt`: fitted to the next run's configuration, bounded by the history's
own misses, per stage where stages differ) beside what KRR's ``simple`` strategy and the VPA
recommender would request from the same series (:mod:`.peers`); :mod:`.backtest` replays a
history to show which requests held and what they wasted.
"""

from optimizer.offline.requests.backtest import STRATEGIES, backtest, summarise
from optimizer.offline.requests.cloudopt import cloudopt_request, stage_requests
from optimizer.offline.requests.peers import DecayingHistogram, krr_simple, vpa_style
from optimizer.offline.requests.request import Request, RunUse, run_use
from optimizer.offline.requests.sizing import JobSizing, right_size, sizing_table

__all__ = ["STRATEGIES", "DecayingHistogram", "JobSizing", "Request", "RunUse", "backtest",
           "cloudopt_request", "krr_simple", "right_size", "run_use", "sizing_table",
           "stage_requests", "summarise", "vpa_style"]

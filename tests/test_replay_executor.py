"""``--executor replay:DIR`` (issue 41): a trial answered from a recorded grid's runs, each
rerun of a setting by the next recorded run, a setting off the grid a failed trial that says
so, a recorded peak above the asked limit an out-of-memory failure."""

from __future__ import annotations

import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig, RunConfig
from optimizer.foundation.errors import ConfigError
from optimizer.trials.executors import TrialRequest, check_available, make_executor
from optimizer.trials.executors.replay import ReplayExecutor, cell_key
from optimizer.trials.records import TrialSummary


def _grid(root):
    for rep, wall in (("rep0", 10.0), ("rep1", 12.0)):
        d = root / "cells" / "g0-c2-b128" / rep
        d.mkdir(parents=True)
        TrialSummary(trial_id=rep, status="completed", allocation=Allocation(0, 2, 8.0, 128),
                     wall_time_s=wall, throughput=1000.0, mem_gb_peak=0.6,
                     total_samples=10000.0).save(d)
        (d / "trace.csv").write_text("exec_id,time_s,cpu_cores,mem_gb\nx,0.5,1.9,0.6\n")
    return root


def test_replayed_trials_follow_the_recorded_runs(tmp_path):
    ex = make_executor(f"replay:{_grid(tmp_path / 'grid')}")
    assert isinstance(ex, ReplayExecutor) and cell_key(Allocation(0, 2, 1.0, 128)) == "g0-c2-b128"
    res = ResourceConfig()
    reqs = [TrialRequest(Allocation(0, 2, 1.0, 128), tmp_path / "run" / f"t{i}") for i in range(3)]
    got = [s for _, s in ex.run(None, reqs, res)]
    assert [s.wall_time_s for s in got] == [10.0, 12.0, 10.0]  # the next run each time
    assert got[0].trial_id == "t0" and got[0].executor == "replay"
    assert got[0].allocation.memory_gb == 1.0  # the limit asked, priced as such
    assert got[0].cost == pytest.approx(got[0].hourly_cost * 10.0 / 3600)
    assert (tmp_path / "run" / "t0" / "trace.csv").is_file()
    assert TrialSummary.load(tmp_path / "run" / "t1").wall_time_s == 12.0
    small = ex.replay(TrialRequest(Allocation(0, 2, 0.5, 128), tmp_path / "run" / "oom"), res)
    assert small.status == "failed" and small.reason == "oom"
    off = ex.replay(TrialRequest(Allocation(0, 1, 1.0, 64), tmp_path / "run" / "off"), res)
    assert off.status == "failed" and "no recorded run of g0-c1-b64" in off.stderr_tail


def test_replay_needs_a_recorded_grid(tmp_path):
    with pytest.raises(ConfigError, match="no cells/ folder"):
        check_available(f"replay:{tmp_path}")
    assert RunConfig(executor=f"replay:{tmp_path}").executor.startswith("replay:")
    with pytest.raises(ConfigError, match="replay:DIR"):
        RunConfig(executor="cluster")


class _Manager:
    """What the replay asks of the script: its own batch size and data-loader workers."""

    def default_batch_size(self):
        return 128

    def default_workers(self):
        return 2


def test_the_scripts_own_settings_and_a_seed_pick_the_recorded_run(tmp_path):
    """A probe at the script's own batch and workers (unset in the allocation) is the grid's
    cell of those values; ``[run].seed`` starts each cell at another repetition; the trial keeps
    the setting the search asked for (a workers sweep stays a workers sweep)."""
    grid = _grid(tmp_path / "grid")
    (grid / "cells" / "g0-c2-b128").rename(grid / "cells" / "g0-c2-b128-w2")
    assert cell_key(Allocation(0, 2, 1.0, None), _Manager()) == "g0-c2-b128-w2"
    assert cell_key(Allocation(0, 2, 1.0, 64, workers=0), _Manager()) == "g0-c2-b64-w0"
    res = ResourceConfig()
    for seed, first in ((0, 10.0), (1, 12.0)):
        ex = make_executor(f"replay:{grid}", seed=seed)
        req = TrialRequest(Allocation(0, 2, 1.0, None), tmp_path / f"s{seed}" / "t0")
        [(_, got)] = list(ex.run(_Manager(), [req], res))
        assert got.status == "completed" and got.wall_time_s == first
        assert got.allocation.batch_size is None and got.allocation.workers is None


class _Unreadable:
    """A script whose own batch is computed in code (``examples/train_mlp.py``): not found."""

    def default_batch_size(self):
        return None

    def default_workers(self):
        return None


def test_the_grid_says_the_scripts_own_batch_where_its_source_does_not(tmp_path):
    grid = _grid(tmp_path / "grid")
    res, req = ResourceConfig(), TrialRequest(Allocation(0, 2, 1.0, None), tmp_path / "t0")
    missing = make_executor(f"replay:{grid}").replay(req, res, _Unreadable())
    assert missing.status == "failed" and "g0-c2-bNone" in missing.stderr_tail
    (grid / "grid.json").write_text('{"default_batch": 128, "default_workers": null}')
    req = TrialRequest(Allocation(0, 2, 1.0, None), tmp_path / "t1")
    got = make_executor(f"replay:{grid}").replay(req, res, _Unreadable())
    assert got.status == "completed" and got.allocation.batch_size is None
    (grid / "grid.json").write_text("[1, 2")
    with pytest.raises(ConfigError, match="grid.json"):
        make_executor(f"replay:{grid}")

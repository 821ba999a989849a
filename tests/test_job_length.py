"""A claim the user can cash: a batch judged by a job that reaches the script's own final loss
(its epochs set through the script's flag) or by its whole job, never by a time "to the same
progress" that a job of fixed epochs does not stop at."""

from __future__ import annotations

import ast
import dataclasses
import math

import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig
from optimizer.search.choice import best_measured, objective_table, rejected_batches
from optimizer.search.goodput.efficiency import NoiseScaleEstimate, TrialEfficiency
from optimizer.search.goodput.job_length import (
    TRAINS_AS_WELL,
    JobLength,
    job_length,
    job_length_decision,
)
from optimizer.trials.records import TrialSummary

SOURCE = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=64)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--num_train_epochs", type=float, default=2.0)
"""


def test_the_knob_is_found_in_the_arguments_then_the_source():
    tree = ast.parse(SOURCE)
    assert job_length(tree, []) == JobLength("--epochs", 4.0, False,
                                             "the default of --epochs in the script's source")
    given = job_length(tree, ["--epochs=6"])
    assert given.epochs == 6.0 and "arguments" in given.source
    hf = job_length(tree, [], "--num_train_epochs")
    assert hf.epochs == 2.0 and hf.fractional and hf.settable
    assert not job_length(ast.parse("x = 1"), []).settable
    assert job_length(None, ["--epochs", "3"]).epochs == 3.0


def test_epochs_that_reach_the_own_batchs_loss():
    job = JobLength("--epochs", 4.0)
    assert job.epochs_for(1.0) == 4.0
    assert job.epochs_for(1.4) == 3.0       # 2.86 -> 3 whole epochs
    assert job.epochs_for(0.8) == 5.0       # a less efficient batch needs more
    assert job.epochs_for(100.0) == 1.0
    assert JobLength("--num_train_epochs", 2.0, True).epochs_for(1.3) == 1.6


def test_seconds_a_batch_is_judged_by():
    short = JobLength("--epochs", 4.0)
    seconds, epochs = short.job_seconds(raw=42.0, fixed=2.0, progress=1.4, own=False)
    assert epochs == 3.0 and seconds == pytest.approx(2.0 + 40.0 * 3 / 4)
    assert short.job_seconds(42.0, 2.0, 1.05, False) == (42.0, None)  # still 4 epochs
    whole = JobLength()
    assert whole.job_seconds(42.0, 2.0, 1.4, False) == (42.0, None)  # its whole job
    assert whole.job_seconds(42.0, 2.0, TRAINS_AS_WELL, False) == (42.0, None)
    assert math.isinf(whole.job_seconds(42.0, 2.0, 0.9, False)[0])  # trains worse
    assert whole.job_seconds(42.0, 2.0, 0.9, True) == (42.0, None)  # the own batch


def _eff(values, job, on=True):
    """An efficiency as the search carries it: the script's batch 64, a value per batch
    (measured, no interval), the job's length knob; ``on=False``: nothing in use."""
    return TrialEfficiency(64, NoiseScaleEstimate(why="none"),
                           efficiency={64: 1.0, **values} if on else {},
                           decided_by="measured progress" if on else "nothing measured",
                           job=job)


def _trial(name, batch, seconds):
    return TrialSummary(name, "completed", Allocation(0, 1, 2.0, batch), wall_time_s=seconds,
                        samples=80000.0, throughput=80000.0 / seconds, total_samples=80000.0,
                        hourly_cost=0.04, startup_s=2.0, exit_s=0.5)


def test_the_choice_between_fixed_epoch_jobs():
    """Batch 32 learns 1.4x as much a sample but its whole job is 20% slower: judged by its
    whole job (no epochs flag) the script's own batch wins; with the flag, batch 32 wins with 3
    of the 4 epochs, and says so."""
    config = OptimizerConfig()
    trials = [_trial("own", 64, 10.0), _trial("small", 32, 12.0), _trial("big", 128, 8.0)]
    values = {32: 1.4, 128: 0.7}
    whole = objective_table(trials, config, "cost", _eff(values, JobLength()))
    assert set(whole["batch_size"]) == {64, 32}  # 128 trains worse and cannot run longer
    best, row = best_measured(trials, config, "cost", efficiency=_eff(values, JobLength()))
    assert best.trial_id == "own"
    job = JobLength("--epochs", 4.0, source="the default of --epochs in the script's source")
    best, row = best_measured(trials, config, "cost", efficiency=_eff(values, job))
    assert best.trial_id == "small" and row["length"] == 3.0
    assert row["job_time_s"] == pytest.approx(2.5 + 9.5 * 3 / 4)
    decision = job_length_decision(job, row, _eff(values, job))
    assert decision["args"] == ["--epochs", "3"] and decision["rule"] == "shorter job"
    assert "3 epochs (--epochs 3), fewer than the script's 4" in decision["note"]
    table = objective_table(trials, config, "cost", _eff(values, job))
    big = table[table["batch_size"] == 128].iloc[0]
    assert big["length"] == 6.0  # 4 / 0.7 = 5.7: six epochs to reach the same loss


def test_without_efficiency_nothing_is_said():
    assert job_length_decision(JobLength("--epochs", 2.0), {"epochs": None}, None) is None


def test_the_choice_says_what_job_its_figures_are_for():
    from optimizer.search.goodput.job_length import figures_words

    shorter = {"efficiency": 1.4, "job_time_s": 9.6, "raw_job_time_s": 12.0, "length": 3.0}
    assert "a job of 3 epochs" in figures_words(shorter, "W", "P")
    whole = {"efficiency": 1.4, "job_time_s": 12.0, "raw_job_time_s": 12.0, "length": None}
    assert figures_words(whole, "W", "P").startswith("W for its whole job")
    progress = {"efficiency": 1.4, "job_time_s": 8.6, "raw_job_time_s": 12.0}
    assert figures_words(progress, "W", "P").startswith("P to the training progress")
    own = {"efficiency": 1.0, "job_time_s": 10.0, "raw_job_time_s": 10.0, "length": None}
    assert figures_words(own, "W", "P") == "W"


def test_the_report_says_what_a_step_and_a_sample_were():
    from optimizer.reports.sources import step_words

    assert "backward pass" in step_words({"step_unit": "backward pass", "steps": 90,
                                          "backward_passes": 90})
    accum = step_words({"step_unit": "optimizer step", "steps": 16, "backward_passes": 64,
                        "dataset_len": 512})
    assert "over 4 backward passes" in accum and "DataLoader" in accum
    plain = step_words({"step_unit": "optimizer step", "steps": 16, "backward_passes": 16})
    assert "one backward pass each" in plain and "the batch the trial set" in plain


def test_with_nothing_measured_only_the_scripts_own_batch_is_recommended():
    """No loss curve and no gradient norm: a larger batch's samples/s says nothing of how it
    trains (a quick job at 32x the batch ended at chance), so it is not recommended."""
    config = OptimizerConfig()
    trials = [_trial("own", 64, 10.0), _trial("huge", 2048, 4.0)]
    off = dataclasses.replace(_eff({}, JobLength("--epochs", 4.0), on=False),
                              untried_batches=True)
    best, _ = best_measured(trials, config, "cost", efficiency=off)
    assert best.trial_id == "own"
    off = dataclasses.replace(off, untried_batches=False)  # no torch to see into, or [run].goodput = false: samples/s
    assert best_measured(trials, config, "cost", efficiency=off)[0].trial_id == "huge"


def test_with_nothing_measured_a_batch_whose_whole_runs_end_as_well_is_recommended():
    """An L-BFGS closure shows no noise scale, yet its whole runs at 4x the batch ended at a
    lower test loss for less: whole runs' final losses still judge where nothing else does."""
    config = OptimizerConfig()
    off = dataclasses.replace(_eff({}, JobLength("--epochs", 4.0), on=False),
                              untried_batches=True)

    def whole(name, batch, seconds, loss):
        return dataclasses.replace(_trial(name, batch, seconds),
                                   model_info={"heldout_loss": loss})

    own, quick = whole("own", 64, 10.0, 0.50), _trial("quick", 128, 3.0)  # quick: no loss
    assert best_measured([own, whole("big", 256, 4.0, 0.45), quick], config, "cost",
                         efficiency=off)[0].trial_id == "big"
    table = objective_table([own, whole("big", 256, 4.0, 0.45)], config, "cost", off)
    big = table[table["batch_size"] == 256].iloc[0]
    assert big["judged_by"] == "whole runs' held-out loss" and big["job_time_s"] == 4.0
    worse = [own, whole("big", 256, 4.0, 0.56), quick]
    assert best_measured(worse, config, "cost", efficiency=off)[0].trial_id == "own"
    assert "0.56" in rejected_batches(worse, off)[256]
    assert rejected_batches(worse, off)[128] == "nothing measured how it trains"


def test_a_job_that_trains_but_showed_no_curve_keeps_its_batch(tmp_path):
    from optimizer.search.planning import measure_efficiency

    ref = TrialSummary("00-own", "probe", Allocation(0, 1, 2.0, 64), wall_time_s=5.0,
                       throughput=100.0, probe={"steps": 40})
    eff = measure_efficiency([ref], ref, tmp_path, True, JobLength("--epochs", 2.0))
    assert not eff.on and eff.untried_batches and eff.job.epochs == 2.0
    assert "only the script's own batch size is recommended" in eff.note
    blind = TrialSummary("00-own", "completed", Allocation(0, 1, 2.0, 64), wall_time_s=5.0,
                         throughput=100.0, probe={"steps": 0})
    assert not measure_efficiency([blind], blind, tmp_path, True).untried_batches


def test_where_whole_runs_alone_judged_the_decision_says_so():
    off = dataclasses.replace(_eff({}, JobLength("--epochs", 4.0), on=False),
                              untried_batches=True)
    row = {"length": None, "judged_by": "whole runs' held-out loss"}
    out = job_length_decision(JobLength("--epochs", 4.0), row, off)
    assert out["judged_by"] == "whole runs' held-out loss" and out["args"] == []
    assert "judged only by the final loss their whole runs ended at" in out["note"]
    assert "(4 epochs)" in out["note"]
    assert job_length_decision(JobLength("--epochs", 4.0), row,
                               dataclasses.replace(off, untried_batches=False)) is None

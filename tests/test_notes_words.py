"""The notes people read name settings in words and weigh them in dollars and seconds; trial
ids and raw objectives stay in the tables and in recommendation.json's own fields."""

import re
from types import SimpleNamespace

import pytest

from optimizer.foundation.allocation import (
    Allocation,
    describe_allocation,
    job_words,
    money_words,
    seconds_words,
)
from optimizer.foundation.config import load_config
from optimizer.foundation.result import Recommendation
from optimizer.reports.run_report import _answer
from optimizer.search.after_loop.recommendation import choice_words
from optimizer.search.after_loop.runoff import standings, tie_note
from optimizer.search.choice import best_measured
from optimizer.search.goodput.efficiency import NoiseScaleEstimate, TrialEfficiency
from optimizer.search.planning import _fallback
from optimizer.trials.records import TrialSummary

TRIAL_ID = re.compile(r"\bg\d+-c\d+-m[\d.]+-b\w+")
"""A setting's key (``g0-c1-m4-b1024``), which every trial id carries after its prefix."""
BARE_OBJECTIVE = re.compile(r"objective \d|\d\.\d+e-\d+")


def _readable(text: str) -> None:
    assert not TRIAL_ID.search(text), text
    assert not BARE_OBJECTIVE.search(text), text


def _trial(tid: str, cpus: int, batch: int | None, thr: float, hour: int,
           gpus: int = 0) -> TrialSummary:
    return TrialSummary(
        trial_id=tid, status="completed", allocation=Allocation(gpus, cpus, 4.0, batch),
        throughput=thr, samples=8000.0, total_samples=8000.0, wall_time_s=8000.0 / thr,
        predicted_total_time_s=8000.0 / thr, mem_gb_peak=0.3, hourly_cost=0.05 * cpus,
        predicted_total_cost=0.05 * cpus * 8000.0 / thr / 3600,
        cost=0.05 * cpus * 8000.0 / thr / 3600,
        started_at=f"2026-01-01T{hour:02d}:00:00.000+00:00",
        finished_at=f"2026-01-01T{hour:02d}:10:00.000+00:00")


def test_settings_in_words():
    assert describe_allocation(Allocation(0, 1, 0.5, 1024)) == "1 CPU, 0.5 GB, batch 1024"
    assert (describe_allocation(Allocation(1, 4, 12.75, 128, 4))
            == "1 GPU, 4 CPUs, 12.75 GB, batch 128, 4 data-loader workers")
    # A job that uses GPUs says so of a setting without; memory as memory_words writes it.
    assert (describe_allocation({"gpus": 0, "cpus": 2, "memory_gb": 0.390625,
                                 "batch_size": None, "workers": 0, "trial": "x"}, gpus=True)
            == "0 GPUs, 2 CPUs, 0.39 GB, the script's own batch, no data-loader workers")
    assert money_words(0.0021) == "$0.0021" and money_words(6.887e-05) == "$0.0000689"
    assert money_words(0.5) == "$0.50" and money_words(1234.5) == "$1,234.50"
    assert [seconds_words(s) for s in (7.36, 41.2, 900, 9000)] == [
        "7.4 s", "41 s", "15.0 min", "2.5 h"]
    assert job_words(0.0021, 41) == "$0.0021 and 41 s for the whole job"


def test_the_choice_and_its_runoff_read_as_settings_dollars_and_seconds():
    cfg = load_config()
    trials = [_trial("00-g0-c2-m4-b128", 2, 128, 400, 1),
              _trial("refine-0-g0-c1-m4-b1024", 1, 1024, 390, 2),
              _trial("runoff-0-cost-g0-c1-m4-b1024", 1, 1024, 400, 3),
              _trial("runoff-0-cost-g0-c1-m4-b512", 1, 512, 396, 4),
              _trial("runoff-1-cost-g0-c1-m4-b512", 1, 512, 392, 5),
              _trial("runoff-1-cost-g0-c1-m4-b1024", 1, 1024, 404, 6)]
    block = [t.trial_id for t in trials if t.trial_id.startswith("runoff-")]
    final, row = best_measured(trials, cfg, "cost", runoff=block)
    table = standings(trials, block, cfg, "cost")
    alloc = Allocation(0, 1, row["memory_gb"], 1024)
    text = choice_words("cost", alloc, row, "measured", "best-static", block, table, trials)
    _readable(text)
    assert text.startswith("the best measured setting for 'cost' is 1 CPU, ")
    figures = job_words(row["job_cost"], row["job_time_s"])
    assert f"batch 1024: {figures} (measured, mean of " in text
    # the runs' spread beside their mean: 400 and 404 s
    assert f"2 runs, standard deviation {row['time_rel_sd']:.1%}; proposed by best-static)" in text
    assert 0.005 < row["time_rel_sd"] < 0.01
    assert "run-off of 4 back-to-back runs among 6 trials" in text
    # The rival the runs' noise cannot separate, by its words, dollars and margin.
    assert table[1]["tied"] and "within the runs' noise of it: 1 CPU, " in tie_note(table)
    assert "batch 512 ($0.0" in text and "for the whole job" in text
    # The machine-readable standings keep the key and the objective.
    assert table[0]["setting"] == "g0-c1-m4-b1024" and table[0]["objective"] > 0
    # Without a run-off: the best of all trials, a probe's figures said to be predicted.
    text = choice_words("balanced", alloc, row, "predicted from a probe", None, [], [], trials)
    _readable(text)
    assert "(predicted from a probe, mean of 2 runs, standard deviation 0.7%; a baseline " \
        "setting); the best of 6 " in text
    weights = choice_words([0.5, 0.3, 0.2], alloc, row, "measured", None, [], [], trials)
    assert "for the weights 0.5, 0.3, 0.2 (cost, time, resource) is" in weights


def test_a_batch_judged_by_goodput_says_its_seconds_are_to_the_own_batchs_progress():
    cfg = load_config()
    trials = [_trial("00-g0-c1-m4-b64", 1, 64, 400, 1), _trial("01-g0-c1-m4-b16", 1, 16, 300, 2)]
    # batch 16 learns twice as much per sample as the script's 64
    eff = TrialEfficiency(64, NoiseScaleEstimate(why="none"), efficiency={64: 1.0, 16: 2.0},
                          decided_by="measured progress")
    final, row = best_measured(trials, cfg, "cost", efficiency=eff)
    assert final.allocation.batch_size == 16 and row["efficiency"] == 2.0
    text = choice_words("cost", final.allocation, row, "measured", None, [], [], trials)
    _readable(text)
    assert "for the whole job" not in text
    whole = f"{row['raw_job_time_s']:.3g} s"
    assert ("to the training progress of the script's own batch size's whole job (efficiency "
            f"2.00; the whole job at this batch: {whole})") in text
    assert row["job_time_s"] == pytest.approx(row["raw_job_time_s"] / 2)
    # The summary table's recommend row says the same of its seconds.
    from optimizer.commands.optimize import _to_progress

    assert _to_progress({"efficiency": 2.0, "whole_job_s": 13.46}) == (
        "; time and cost to the script's own batch's training progress (efficiency 2.00; its "
        "whole job: 13.5 s)")
    assert _to_progress({"efficiency": 1.0}) == "" and _to_progress({}) == ""


def test_a_gpu_job_names_gpus_in_every_setting():
    cfg = load_config()
    trials = [_trial("00-g1-c2-m4-b128", 2, 128, 900, 1, gpus=1),
              _trial("01-g0-c2-m4-b128", 2, 128, 100, 2)]
    final, row = best_measured(trials, cfg, "time")
    text = choice_words("time", final.allocation, row, "measured", None, [], [], trials)
    assert "is 1 GPU, 2 CPUs, 4 GB, batch 128: $" in text
    _readable(text)


def test_the_fallback_note_and_the_answer_name_no_trial():
    trials = [_trial("00-g0-c2-m4-b128", 2, 128, 400, 1),
              _trial("01-g0-c1-m4-b128", 1, 128, 300, 2)]
    opt = SimpleNamespace(config=load_config(), user_preference="cost",
                          say=lambda *a, **k: None)
    note = _fallback(opt, trials, "one batch size")["notes"][0]
    _readable(note)
    assert "the best measured baseline setting (1 CPU, 4 GB, batch 128: $" in note
    alloc = Allocation(0, 1, 0.5, 1024)
    rec = Recommendation(
        allocation=alloc, agent="expected-improvement", final_trial="refine-0-g0-c1-m4-b1024",
        choice="c", measured={"trial": "refine-0-g0-c1-m4-b1024", "job_time_s": 20.5,
                              "job_cost": 0.000103, "time_is": "predicted from a probe"},
        rounds=[{"trial": "refine-0-g0-c1-m4-b1024"}], fit={"max_rel_error": 0.15,
                                                            "n_trials": 5})
    answer = _answer(rec, "cost", trials[0], alloc)
    _readable(answer)
    first, *rest = answer.splitlines()
    assert first == "Run it with 1 CPU, 0.5 GB, batch 1024."
    assert rest[0].startswith("Measured: $0.000103 and 20 s per job, ")
    assert "than the default allocation (2 CPUs, 4 GB, batch 128: $" in rest[0]
    assert rest[1].startswith("Verified by real runs of this setting (the job's time and cost "
                              "predicted from a probe)")


@pytest.mark.parametrize("text", ["the best measured trial for the preference is "
                                  "confirm-0-g0-c1-m4-b1024; objective 0.0001031",
                                  "runoff-2-cost-g0-c1-m4-b1024 6.887e-05 over 3 runs"])
def test_the_old_wording_is_caught(text):
    with pytest.raises(AssertionError):
        _readable(text)


def test_the_recommend_row_names_the_job_its_figures_are_for():
    from optimizer.commands.optimize import _to_progress

    job = {"args": ["--epochs", "3"], "rule": "shorter job"}
    m = {"efficiency": 1.56, "whole_job_s": 42.3, "job_time_s": 33.2}
    assert _to_progress(m, job).startswith("; a job of --epochs 3, which reaches")
    whole = {"efficiency": 1.3, "whole_job_s": 20.0, "job_time_s": 20.0}
    assert "its whole job, which trains at least as well" in _to_progress(
        whole, {"args": [], "rule": "whole job"})

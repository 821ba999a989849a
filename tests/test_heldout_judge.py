"""Whole runs judged by the held-out loss the script printed at their end: a batch whose
training curve reads more efficient but whose whole run ends at a worse held-out loss is not
recommended (sgd_no_loader's batch 32: 1.6x by its curve, test loss 0.341 against 0.312)."""

from __future__ import annotations

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.search.choice import best_measured, goodput_comparison, objective_table
from optimizer.search.goodput.efficiency import Measured, NoiseScaleEstimate, TrialEfficiency
from optimizer.search.goodput.heldout import heldout_by_batch, trains_worse
from optimizer.trials.output import final_heldout_loss
from optimizer.trials.records import TrialSummary


def _run(tid: str, batch: int, seconds: float, loss: float | None,
         status: str = "completed") -> TrialSummary:
    return TrialSummary(tid, status, Allocation(0, 1, 4.0, batch), wall_time_s=seconds,
                        samples=1e5, throughput=1e5 / seconds, hourly_cost=0.05,
                        cost=0.05 * seconds / 3600, total_samples=1e5,
                        predicted_total_time_s=seconds, mem_gb_peak=1.0,
                        model_info={} if loss is None else {"heldout_loss": loss})


# batch 32 trains faster on its training curve (1.6x) but ends at a worse held-out loss
RUNS = [_run("own-a", 64, 7.2, 0.3122), _run("own-b", 64, 7.0, 0.3130),
        _run("small", 32, 8.5, 0.3411), _run("big", 128, 6.6, 0.3120)]
EFF = TrialEfficiency(64, NoiseScaleEstimate(why="none"),
                      measured={32: Measured(1.6, 1.5, 1.7), 128: Measured(1.0, 1.0, 1.0)},
                      efficiency={32: 1.6, 64: 1.0, 128: 1.0}, decided_by="measured progress")


def test_the_printed_held_out_loss_is_read_as_users_print_it():
    assert final_heldout_loss("epoch 1 val_loss=0.61\nfinal val_loss=0.5546") == 0.5546
    assert final_heldout_loss("| End of training | test loss  3.88 | test ppl 48") == 3.88
    assert final_heldout_loss("{'eval_loss': 0.4652, 'epoch': 2.0}") == 0.4652
    assert final_heldout_loss("Validation loss: 0.1043") == 0.1043
    assert final_heldout_loss("train_loss 0.5, 100 samples/s") is None


def test_a_batch_whose_whole_runs_end_worse_is_set_aside():
    assert heldout_by_batch(RUNS)[64] == (0.3122 + 0.3130) / 2
    worse = trains_worse(RUNS, 64)
    assert set(worse) == {32} and worse[32][0] == 0.3411
    # probes say nothing of where a job ends; without the own batch's whole run, nothing
    probes = [_run("own", 64, 7.2, 0.31, status="probe"), RUNS[2]]
    assert trains_worse(probes, 64) == {}


def test_the_choice_never_takes_a_batch_that_ends_worse():
    cfg = load_config(None)
    table = objective_table(RUNS, cfg, "cost", EFF)
    assert "small" not in set(table["trial_id"])  # 8.5 s / 1.5 would have won at 5.7 s
    best, _ = best_measured(RUNS, cfg, "cost", efficiency=EFF)
    assert best.trial_id == "big"  # ends as well (0.3120), and is faster
    note = goodput_comparison(RUNS, cfg, "cost", best, EFF)["heldout"]["note"]
    assert "batch 32 (0.3411 against 0.3126)" in note
    # without printed losses the curve decides, as before
    bare = [_run(t.trial_id, t.allocation.batch_size, t.wall_time_s, None) for t in RUNS]
    assert best_measured(bare, cfg, "cost", efficiency=EFF)[0].trial_id == "small"


def test_a_probe_near_its_jobs_end_runs_to_it():
    """Stopped at 90% of its job, a probe showed nothing of where the job ends; the rest costs
    at most a third more and gives the whole run's printed loss."""
    from types import SimpleNamespace

    from optimizer.trials.probe.stop import NEAR_END, near_end

    job = 300_160.0
    assert near_end(SimpleNamespace(job_samples=job, probe_last=(7.5, 0.9 * job)))
    assert not near_end(SimpleNamespace(job_samples=job, probe_last=(3.0, 0.5 * job)))
    assert not near_end(SimpleNamespace(job_samples=None, probe_last=(7.5, 0.9 * job)))
    assert not near_end(SimpleNamespace(job_samples=job, probe_last=None))
    assert near_end(SimpleNamespace(job_samples=job, probe_last=(1.0, (1 - NEAR_END) * job)))


def test_a_probe_whose_start_up_took_its_box_runs_to_an_end_a_few_seconds_away():
    """compiled: 20 s of start-up, half the samples done when the box ended and 4 s left at
    its rate; its whole runs took 6 s more than the probes said, after the last step."""
    from types import SimpleNamespace

    from optimizer.trials.output import RateTracker
    from optimizer.trials.probe.stop import near_end

    rates = RateTracker()
    for t in range(21, 26):
        rates.add(float(t), 22_000.0)
    run = SimpleNamespace(job_samples=200_000.0, probe_last=(25.7, 108_000.0), rates_probe=rates)
    assert near_end(run, 25.7)  # 92,000 samples: 4.2 s, within a third of 25.7 s
    assert not near_end(run, 10.0)  # 4.2 s is more than a third of 10 s
    assert not near_end(run)  # no time given: the samples' rule alone
    assert not near_end(SimpleNamespace(job_samples=200_000.0, probe_last=(25.7, 108_000.0),
                                        rates_probe=RateTracker()), 25.7)  # no rate yet


def test_a_batch_whose_whole_runs_end_as_well_gets_no_longer_job():
    from optimizer.search.goodput.heldout import trains_as_well
    from optimizer.search.goodput.job_length import JobLength

    # train_ddp.py: batch 512 read 0.75 (0.53 at the low end) from its training curve, and
    # was given 6 epochs instead of 3, though its whole runs of 3 ended lower (1.210 < 1.252)
    runs = [_run("own", 64, 14.0, 1.2518), _run("big", 512, 8.0, 1.2101),
            _run("worse", 256, 9.0, 1.30)]
    eff = TrialEfficiency(64, NoiseScaleEstimate(why="none"),
                          measured={512: Measured(0.75, 0.53, 0.97),
                                    256: Measured(0.9, 0.8, 1.0)},
                          efficiency={64: 1.0, 256: 0.9, 512: 0.75},
                          decided_by="measured progress",
                          job=JobLength(flag="--epochs", length=3.0, source="the source"))
    assert set(trains_as_well(runs, 64)) == {512}
    table = objective_table(runs, load_config(None), "cost", eff).set_index("trial_id")
    assert table.loc["big", "efficiency"] == 1.0 and bool(table.loc["big", "heldout_confirmed"])
    assert table.loc["big", "length"] is None  # the script's own epochs
    assert table.loc["big", "job_time_s"] == 8.0
    assert "worse" not in table.index
    # without the own batch's whole run, the curve's low end decides as before
    alone = objective_table(runs[1:], load_config(None), "cost", eff).set_index("trial_id")
    assert alone.loc["big", "efficiency"] < 1.0


def test_a_batch_beyond_one_that_ends_worse_is_set_aside_with_it():
    from optimizer.search.goodput.heldout import beyond_worse

    worse = trains_worse(RUNS, 64)  # batch 32 ends worse
    assert beyond_worse(16, worse, 64) and beyond_worse(8, worse, 64)
    assert not beyond_worse(48, worse, 64) and not beyond_worse(256, worse, 64)
    assert not beyond_worse(16, {}, 64) and not beyond_worse(16, worse, None)
    probe16 = _run("tiny", 16, 5.0, None, status="probe")  # only probed, fast by its curve
    eff = TrialEfficiency(64, NoiseScaleEstimate(why="none"),
                          measured={**EFF.measured, 16: Measured(1.8, 1.6, 2.0)},
                          efficiency={**EFF.efficiency, 16: 1.8}, decided_by="measured progress")
    table = objective_table([*RUNS, probe16], load_config(None), "cost", eff)
    assert "tiny" not in set(table["trial_id"]) and "big" in set(table["trial_id"])

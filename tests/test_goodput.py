"""Goodput in the choice, the model and the report (issue 39): batch sizes compared by time and
cost to the same training progress whenever statistical efficiency was measured, by samples/s
(and saying so) when it was not."""

from __future__ import annotations

import dataclasses
import json

import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.search.choice import best_measured, goodput_comparison, objective_table
from optimizer.search.goodput.efficiency import NoiseScaleEstimate, TrialEfficiency
from optimizer.search.planning import measure_efficiency
from optimizer.trials.records import TrialSummary

TOTAL = 1e6


def _trial(tid: str, batch: int, throughput: float) -> TrialSummary:
    seconds = TOTAL / throughput
    return TrialSummary(tid, "completed", Allocation(0, 1, 4.0, batch), wall_time_s=seconds,
                        samples=TOTAL, throughput=throughput, hourly_cost=0.05,
                        cost=0.05 * seconds / 3600, total_samples=TOTAL,
                        predicted_total_time_s=seconds, mem_gb_peak=1.0)


def _efficiency(phi: float, ref: int = 128, batches=(128, 2048)) -> TrialEfficiency:
    noise = NoiseScaleEstimate(value=phi, low=phi / 2, high=phi * 2, pairs=8, source="windows")
    return TrialEfficiency(ref, noise, prior={b: (phi + ref) / (phi + b) for b in batches},
                           efficiency={b: (phi + ref) / (phi + b) for b in batches},
                           decided_by="noise scale", note="measured")


TRIALS = [_trial("own", 128, 1000.0), _trial("big", 2048, 1500.0)]


def test_without_efficiency_the_larger_batch_wins_on_samples_per_second():
    cfg = load_config(None)
    best, _ = best_measured(TRIALS, cfg, "time")
    assert best.trial_id == "big"


def test_with_efficiency_the_choice_is_by_time_to_the_same_progress():
    cfg = load_config(None)
    eff = _efficiency(phi=500.0)  # E(2048) = 628 / 2548 = 0.25: 1.5x the rate, 4x the samples
    table = objective_table(TRIALS, cfg, "time", eff).set_index("trial_id")
    # judged at the low end of the noise scale's interval (250 to 1000: 378 / 2298)
    assert table.loc["big", "efficiency_estimate"] == pytest.approx(628 / 2548)
    assert table.loc["big", "efficiency"] == pytest.approx(378 / 2298)
    assert table.loc["big", "job_time_s"] == pytest.approx(TOTAL / 1500 / (378 / 2298))
    assert table.loc["own", "job_time_s"] == pytest.approx(TOTAL / 1000)
    assert table.loc["big", "raw_job_time_s"] == pytest.approx(TOTAL / 1500)
    best, _ = best_measured(TRIALS, cfg, "time", efficiency=eff)
    assert best.trial_id == "own"
    # A large noise scale (efficiency ~0.97 at 2048) leaves the larger batch ahead.
    assert best_measured(TRIALS, cfg, "time", efficiency=_efficiency(phi=1e5))[0].trial_id == \
        "big"


def test_an_efficiency_curve_between_and_beyond_the_measured_batches():
    eff = _efficiency(phi=1000.0)
    assert eff(128) == 1.0 and eff(None) == 1.0
    assert eff(512) == pytest.approx(1128 / 1512)  # not measured: the noise-scale form
    assert eff.phi() == 1000.0
    corrected = TrialEfficiency(128, NoiseScaleEstimate(why="no gradients"),
                                efficiency={128: 1.0, 1024: 0.5}, decided_by="measured progress")
    # the phi whose form gives 0.5 at 1024 from 128: (phi + 128) / (phi + 1024) = 0.5 -> 768
    assert corrected.phi() == pytest.approx(768, rel=0.02)
    off = TrialEfficiency(128, NoiseScaleEstimate(why="none"))
    assert not off.on and off(4096) == 1.0 and off.phi() == 0.0


def test_the_comparison_names_the_scripts_batch_and_the_recommended_one():
    cfg = load_config(None)
    eff = _efficiency(phi=500.0)
    out = goodput_comparison(TRIALS, cfg, "time", TRIALS[1], eff)
    own, rec = out["comparison"]
    assert own["batch_size"] == 128 and rec["batch_size"] == 2048
    assert rec["goodput"] == pytest.approx(1500 * 628 / 2548)
    assert rec["time_to_same_progress_s"] > own["time_to_same_progress_s"]
    assert out["decided_by"] == "noise scale" and out["noise_scale"]["value"] == 500.0
    json.dumps(out)  # JSON-ready for recommendation.json


def test_the_comparison_says_where_each_efficiency_comes_from_with_its_interval(tmp_path):
    from optimizer.reports.goodput import goodput_section
    from optimizer.reports.render import Report
    from optimizer.search.goodput.efficiency import Measured

    cfg = load_config(None)
    prior = _efficiency(phi=500.0)  # noise scale 250 to 1000: E(2048) from 0.13 to 0.37
    rec = goodput_comparison(TRIALS, cfg, "time", TRIALS[1], prior)["comparison"][1]
    assert rec["efficiency_source"] == "noise scale"
    assert rec["efficiency_low"] == pytest.approx(378 / 2298)
    assert rec["efficiency_high"] == pytest.approx(1128 / 3048)
    measured = dataclasses.replace(prior, measured={2048: Measured(0.6, 0.4, 0.9)},
                                   efficiency={128: 1.0, 2048: 0.6})
    own, rec = goodput_comparison(TRIALS, cfg, "time", TRIALS[1], measured)["comparison"]
    assert (own["efficiency_source"], own["efficiency_low"]) == ("own batch", None)
    assert (rec["efficiency_source"], rec["efficiency_low"], rec["efficiency_high"]) == (
        "measured", 0.4, 0.9)
    # A probe that stopped short capped it below the measured value: only "at most".
    capped = dataclasses.replace(measured, efficiency={128: 1.0, 2048: 0.5})
    out = goodput_comparison(TRIALS, cfg, "time", TRIALS[1], capped)
    assert out["comparison"][1]["efficiency_source"] == "bound"
    r = Report("run")
    goodput_section(r, goodput_comparison(TRIALS, cfg, "time", TRIALS[1], measured), None)
    assert "0.60 (0.40 to 0.90), measured" in r.to_markdown(tmp_path)
    goodput_section(r := Report("run"), out, None)
    assert "0.50, at most" in r.to_markdown(tmp_path)


def test_efficiency_is_off_and_says_so_without_a_known_batch(tmp_path):
    ref = TrialSummary("r", "completed", Allocation(0, 1, 4.0, None), throughput=10.0)
    eff = measure_efficiency([ref], ref, tmp_path)
    assert not eff.on and "unknown" in eff.note


def test_efficiency_is_off_and_says_so_when_no_probe_saw_gradients(tmp_path):
    (tmp_path / "trials" / "own").mkdir(parents=True)
    eff = measure_efficiency(TRIALS, TRIALS[0], tmp_path)
    assert not eff.on and eff.decided_by == "nothing measured"
    assert eff.note.startswith("Statistical efficiency is off")


def test_the_model_the_agents_plan_on_uses_goodput_when_measured():
    from optimizer.search.planning import fit_env_config

    cfg = load_config(None, {"resources": {"cpu_count_max": 2, "gpu_count_max": 0}})
    trials = [_trial(f"t{i}", b, thr) for i, (b, thr) in enumerate(
        [(64, 700.0), (128, 1000.0), (256, 1300.0), (512, 1450.0)])]
    trials += [TrialSummary("c2", "completed", Allocation(0, 2, 8.0, 128), wall_time_s=600.0,
                            samples=TOTAL, throughput=1700.0, hourly_cost=0.1, cost=0.02,
                            total_samples=TOTAL, predicted_total_time_s=600.0, mem_gb_peak=1.0)]
    off = fit_env_config(cfg, "time", trials, trials[1], TOTAL, None)
    on = fit_env_config(cfg, "time", trials, trials[1], TOTAL, None, _efficiency(300.0))
    assert off.workload.efficiency(512) == 1.0
    assert on.workload.params.ref_batch == 128
    assert on.workload.efficiency(512) == pytest.approx(428 / 812)


def test_a_measured_progress_beyond_what_batch_size_can_do_corrects_nothing(tmp_path,
                                                                            monkeypatch):
    """16x the script's per-sample progress at 8x its batch (env_batch.py's short probes, one
    in the loss's fast early drop) is not a batch-size effect: efficiency stays off, and says
    why. A value just past the bound is clipped to it."""
    from optimizer.search.goodput import efficiency as eff_module
    from optimizer.search.goodput.efficiency import Measured, efficiency_from_trials

    def measured(m):
        monkeypatch.setattr(eff_module, "common_loss_efficiency",
                            lambda best, ref: {256: Measured(1.0, 1.0, 1.0), 2048: m})
        return efficiency_from_trials([], tmp_path, 256)

    monkeypatch.setattr(eff_module, "probe_records", lambda trials, run_dir: {256: [], 2048: []})
    monkeypatch.setattr(eff_module, "estimate_noise_scale",
                        lambda records: NoiseScaleEstimate(why="no measurable gradient noise"))
    monkeypatch.setattr(eff_module, "best_records", lambda records: {})
    monkeypatch.setattr(eff_module, "progress_over_shared_samples", lambda best: {})
    out = measured(Measured(16.4, 15.0, 18.0))
    assert not out.on and out.decided_by == "nothing measured"
    assert "outside what batch size alone can do (0.12x to 1.00x)" in out.note
    plausible = measured(Measured(0.5, 0.45, 0.55))
    assert plausible.decided_by == "measured progress" and plausible(2048) == 0.5
    clipped = measured(Measured(1.05, 0.9, 1.2))
    assert clipped(2048) == 1.0 and clipped.measured[2048].high == 1.0
    assert measured(Measured(0.1, 0.09, 0.115))(2048) == 0.125  # at least the same steps

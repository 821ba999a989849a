"""Statistical efficiency measured on the user's script (optimizer.search.goodput.efficiency): the
gradient noise scale against a known truth, through the real in-process probe, the loss progress
per sample, and the rule that decides between them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.search.goodput.common_loss import samples_ratio
from optimizer.search.goodput.efficiency import (
    efficiency_from_trials,
    estimate_noise_scale,
    loss_points,
    loss_progress,
    noise_scale,
    probe_records,
)
from optimizer.trials.probe import EVENTS_FILE, probe_environment
from optimizer.trials.probe.events import ProbeRecord
from optimizer.trials.records import TrialSummary

D = 20


def least_squares(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X, y, w``: ``y = X w* + noise`` (sigma 2) and ``w`` a unit step away from ``w*``, in
    float32 as a script would hold them."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    w_star = rng.standard_normal(D)
    y = X @ w_star + 2.0 * rng.standard_normal(n)
    step = rng.standard_normal(D)
    return X.astype(np.float32), y.astype(np.float32), (w_star + step / np.linalg.norm(step)
                                                         ).astype(np.float32)


def per_sample_grads(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Gradients of ``0.5 (x.w - y)^2``, one row per sample."""
    X, y, w = (a.astype(np.float64) for a in (X, y, w))
    return X * (X @ w - y)[:, None]


def true_noise_scale(g: np.ndarray) -> float:
    """``tr(Sigma) / |G|^2`` exactly over the dataset (the distribution minibatches come from)."""
    G = g.mean(0)
    return float(((g - G) ** 2).sum(1).mean() / (G @ G))


def batch_sq_norms(g: np.ndarray, batch: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``|G_B|^2`` of ``count`` minibatches of ``batch`` samples drawn with replacement."""
    return (g[rng.integers(0, len(g), (count, batch))].mean(1) ** 2).sum(1)


def synthetic_record(g: np.ndarray, batch: int, rng: np.random.Generator, windows: int = 0,
                     k: int = 32, singles: int = 0) -> ProbeRecord:
    """A probe record as the reader builds it: ``windows`` windows of ``k`` steps (their steps
    also listed as single steps, as the reader does) and ``singles`` single steps."""
    rec, step = ProbeRecord(header={}), 1
    for _ in range(windows):
        means = g[rng.integers(0, len(g), (k, batch))].mean(1)
        small = (means**2).sum(1).tolist()
        rec.windows.append({"e": "gradwin", "step": step, "k": k, "samples": [batch] * k,
                            "small": small, "big": float((means.mean(0) ** 2).sum())})
        rec.grads.extend((step + i, batch, v) for i, v in enumerate(small))
        step += k
    rec.grads.extend((step + i, batch, float(v))
                     for i, v in enumerate(batch_sq_norms(g, batch, singles, rng)))
    return rec


# -- the estimators against a known truth -------------------------------------------------------


def test_noise_scale_recovers_a_known_truth():
    X, y, w = least_squares(4096)
    g = per_sample_grads(X, y, w)
    truth = true_noise_scale(g)
    assert 60 < truth < 150  # the problem is set so both batch sizes below say something
    rng = np.random.default_rng(2)
    small, big = batch_sq_norms(g, 16, 400, rng), batch_sq_norms(g, 256, 400, rng)
    estimate = noise_scale(16, small, 256, big)
    assert estimate == pytest.approx(truth, rel=0.3)
    # Scalars and arrays of batch sizes mean the same pairs.
    assert noise_scale(np.full(400, 16), small, np.full(400, 256), big) == estimate
    with pytest.raises(ValueError):
        noise_scale(64, small, 16, big)


@pytest.mark.parametrize("layout", ["windows", "batches", "both"])
def test_the_estimate_and_its_bootstrap_interval_hold_the_truth(layout):
    X, y, w = least_squares(4096)
    g = per_sample_grads(X, y, w)
    truth = true_noise_scale(g)
    rng = np.random.default_rng(3)
    records = {
        "windows": {16: [synthetic_record(g, 16, rng, windows=30)]},
        "batches": {16: [synthetic_record(g, 16, rng, singles=300)],
                    128: [synthetic_record(g, 128, rng, singles=300)]},
        "both": {16: [synthetic_record(g, 16, rng, windows=10)],
                 64: [synthetic_record(g, 64, rng, windows=10)]},
    }[layout]
    est = estimate_noise_scale(records)
    assert est.ok and est.why == ""
    assert est.value == pytest.approx(truth, rel=0.3)
    assert est.low <= truth <= est.high
    assert est.low < est.value < est.high
    assert est.source == {"windows": "windows", "batches": "batches",
                          "both": "windows+batches"}[layout]
    assert est.pairs == {"windows": 30, "batches": 1, "both": 21}[layout]
    assert estimate_noise_scale(records) == est  # seeded: the same records, the same interval


@pytest.mark.parametrize("windows, k", [(12, 32), (2, 256), (1, 256)])
def test_the_interval_covers_the_truth_about_as_often_as_it_says(windows, k):
    # One or two windows per trial is what a short trial gets (one every 2 s at most):
    # percentiles of so few resampled windows covered the truth in under half the cases.
    X, y, w = least_squares(65536)
    g = per_sample_grads(X, y, w)
    truth = true_noise_scale(g)
    hits, widths = 0, []
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        est = estimate_noise_scale({16: [synthetic_record(g, 16, rng, windows, k)],
                                    64: [synthetic_record(g, 64, rng, windows, k)]}, n_boot=300)
        hits += est.low <= truth <= est.high
        widths.append(est.high / est.low)
    assert hits >= 32  # nominal 90% of 40 = 36
    assert np.median(widths) < 1.5  # and not by saying nothing


def test_noise_that_drowns_the_gradient_or_no_noise_at_all_is_said_not_guessed():
    def record(small: float, big: float) -> ProbeRecord:
        rec = ProbeRecord(header={})
        for i in range(3):
            rec.windows.append({"step": 1 + 4 * i, "k": 4, "samples": [16] * 4,
                                "small": [small] * 4, "big": big})
            rec.grads.extend((1 + 4 * i + j, 16, small) for j in range(4))
        return rec

    # E|G_B|^2 falls from 10 at B=16 to 1 at B=64: more than noise alone allows.
    drowned = estimate_noise_scale({16: [record(10.0, 1.0)]})
    assert not drowned.ok and drowned.grad_sq < 0 and "|G|^2" in drowned.why
    flat = estimate_noise_scale({16: [record(10.0, 10.0)]})
    assert not flat.ok and "tr(Sigma)" in flat.why
    zero = estimate_noise_scale({16: [record(0.0, 0.0)]})
    assert not zero.ok and "all zero" in zero.why
    lone = estimate_noise_scale({16: [ProbeRecord(header={}, grads=[(1, 16, 3.0), (2, 16, 2.0)])]})
    assert not lone.ok and "nothing to pair" in lone.why
    assert "no gradient norms" in estimate_noise_scale({16: [ProbeRecord(header={})]}).why


# -- loss progress ------------------------------------------------------------------------------


def loss_record(batch: int, steps: int, rate: float, noise: float, seed: int = 0,
                every: int = 1) -> ProbeRecord:
    """Loss falling by ``rate`` per sample with Gaussian noise; the first steps are wild."""
    rng = np.random.default_rng(seed)
    rec = ProbeRecord(header={})
    rec.batch_sizes[batch] += 1
    rec.step_points = np.array([(s * 1e-3, s, s * batch) for s in range(1, steps + 1)], float)
    rec.losses = [(s, s * 1e-3, 5.0 - rate * (s - 1) * batch + noise * rng.standard_normal()
                   + (50.0 if s <= 5 else 0.0)) for s in range(1, steps + 1, every)]
    return rec


@pytest.mark.parametrize("steps", [200, 3000])  # 3000 losses are binned before Theil-Sen
def test_loss_progress_is_the_fall_per_sample_after_the_first_steps(steps):
    p = loss_progress(loss_record(32, steps, 1e-4, 0.05))
    assert p.value == pytest.approx(1e-4, rel=0.1)
    assert p.low <= 1e-4 <= p.high and p.why == ""
    assert p.span[0] == 5 * 32  # the first five steps are left out


def test_loss_progress_says_why_when_there_is_none():
    assert "too few" in loss_progress(loss_record(32, 9, 1e-4, 0.05)).why
    flat = loss_progress(loss_record(32, 100, 0.0, 0.0))
    assert flat.value == 0.0 and "did not change" in flat.why
    none = loss_progress(ProbeRecord(header={}))
    assert none.value is None and "backward()" in none.why


# -- samples to a common loss -------------------------------------------------------------------


def flattening(batch: int, efficiency: float, samples: int = 40_000, noise: float = 0.03,
               seed: int = 0) -> ProbeRecord:
    """A loss that flattens as training goes on, ``0.5 + 2 exp(-E s / 8000)`` at ``s`` samples:
    at efficiency ``E`` a run needs ``1/E`` of the samples to reach any loss."""
    rng = np.random.default_rng(seed)
    steps = samples // batch
    rec = ProbeRecord(header={})
    rec.batch_sizes[batch] += 1
    rec.step_points = np.array([(s * 1e-3, s, s * batch) for s in range(1, steps + 1)], float)
    rec.losses = [(s, s * 1e-3, 0.5 + 2.0 * np.exp(-efficiency * (s - 1) * batch / 8000)
                   + noise * rng.standard_normal()) for s in range(1, steps + 1)]
    return rec


@pytest.mark.parametrize("batch, efficiency", [(32, 1.5), (128, 0.6), (64, 1.0)])
def test_samples_to_a_common_loss_recover_a_known_efficiency(batch, efficiency):
    ref, other = flattening(64, 1.0, seed=1), flattening(batch, efficiency, seed=2)
    value, low, high, why = samples_ratio(loss_points(ref), loss_points(other))
    # A curve that bends within one decay length of the smoothing reads nearer 1 than it is
    # (1.39 for 1.5 here): the estimate errs towards the script's own batch.
    assert why == "" and value == pytest.approx(efficiency, rel=0.1)
    assert abs(value - 1) <= abs(efficiency - 1) + 0.05
    assert low <= value <= high and high / low < 1.3
    assert samples_ratio(loss_points(ref), loss_points(other)) == (value, low, high, why)


def test_slopes_over_the_same_samples_under_rate_the_batch_that_trains_faster():
    """cnn on the regret suite: over the same stretch of samples the loss fell more slowly at
    batch 32 (0.80x) although it reached the default's loss in 1.44x fewer samples; the more
    efficient run is further down a flattening curve."""
    ref, fast = flattening(64, 1.0, seed=1), flattening(32, 1.5, seed=2)
    slopes = loss_progress(fast).value / loss_progress(ref).value
    common = samples_ratio(loss_points(ref), loss_points(fast))[0]
    assert slopes < 1.0 < 1.3 < common


def test_samples_to_a_common_loss_say_why_when_there_is_none():
    ref, flat = flattening(64, 1.0, seed=1), flattening(64, 0.0, seed=2)
    assert samples_ratio(loss_points(ref), loss_points(flat))[:3] == (0.0, 0.0, 0.0)
    none = samples_ratio(loss_points(flat), loss_points(ref))
    assert none[0] is None and "reference batch" in none[3]
    short = samples_ratio(loss_points(ref), (np.arange(5.0), np.ones(5)))
    assert short[0] is None and "too few" in short[3]


def test_a_larger_batch_is_not_taken_to_train_better_per_sample(tmp_path):
    """Bounds of batch size alone at a fixed rate: a larger batch's measured edge is capped at
    1, a smaller batch's at the ratio of the batch sizes (the same steps)."""
    def trial(name, batch, eff):
        rec = flattening(batch, eff, seed=batch)
        events = [{"e": "header", "version": 1}]
        events += [{"e": "steps", "t": t, "step": int(st), "samples": int(n), "n": 1}
                   for t, st, n in rec.step_points]
        events += [{"e": "loss", "t": t, "step": st, "value": v} for st, t, v in rec.losses]
        return write_trial(tmp_path, name, batch, events)

    eff = efficiency_from_trials([trial("a", 64, 1.0), trial("b", 256, 1.08),
                                  trial("c", 32, 1.5), trial("d", 16, 6.0)], tmp_path, 64)
    assert eff.decided_by == "measured progress"
    assert eff.efficiency[256] == 1.0 and eff.measured[256].high == 1.0  # clipped
    assert eff.efficiency[32] == pytest.approx(1.5, rel=0.1)
    assert 1.5 < eff.efficiency[16] <= 4.0
    assert "reach the lowest loss both it and the script's own" in eff.note


# -- a run's trials: the rule -------------------------------------------------------------------


def write_trial(run_dir: Path, trial_id: str, batch: int, events: list[dict] | None,
                status: str = "probe") -> TrialSummary:
    folder = run_dir / "trials" / trial_id
    folder.mkdir(parents=True)
    if events is not None:
        (folder / EVENTS_FILE).write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return TrialSummary(trial_id=trial_id, status=status, allocation=Allocation(batch_size=batch))


def events_of(batch: int, rate: float, g: np.ndarray | None, seed: int,
              steps: int = 2000) -> list[dict]:
    """Probe events of a trial: steps, a falling loss every 5 steps, gradient windows."""
    rng = np.random.default_rng(seed)
    out = [{"e": "header", "version": 1}, {"e": "first_step", "t": 0.0, "samples": batch}]
    out += [{"e": "steps", "t": s * 1e-3, "step": s, "samples": s * batch, "n": 10}
            for s in range(10, steps + 1, 10)]
    out += [{"e": "loss", "t": s * 1e-3, "step": s,
             "value": 5.0 - rate * (s - 1) * batch + 0.02 * rng.standard_normal()}
            for s in range(1, steps + 1, 5)]
    if g is not None:
        rec = synthetic_record(g, batch, rng, windows=15)
        out += [{**win, "t": 1.0} for win in rec.windows]
    return out


@pytest.mark.parametrize("rate_128", [0.56, 0.25])
def test_the_noise_scale_is_the_prior_and_measured_progress_corrects_it(tmp_path, rate_128):
    """The curves decide wherever they give a value, also inside an interval that holds the
    prior (0.56: near the form's value); the form fills in the batch sizes they do not."""
    X, y, w = least_squares(4096)
    g = per_sample_grads(X, y, w)
    trials = [write_trial(tmp_path, "a", 32, events_of(32, 1e-5, g, 1)),
              write_trial(tmp_path, "b", 128, events_of(128, rate_128 * 1e-5, g, 2)),
              write_trial(tmp_path, "c", 512, events_of(512, 0.0, g, 3), status="failed")]
    eff = efficiency_from_trials(trials, tmp_path, ref_batch=32)
    phi = eff.noise.value
    assert phi == pytest.approx(true_noise_scale(g), rel=0.3)
    assert sorted(eff.prior) == [32, 128]  # the failed trial is left out
    assert eff.prior[128] == pytest.approx((phi + 32) / (phi + 128))
    assert eff.measured[128].value == pytest.approx(rate_128, rel=0.1)
    assert eff.decided_by == "measured progress" and eff.efficiency[32] == 1.0
    assert eff.efficiency[128] == eff.measured[128].value
    assert f"{eff.measured[128].value:.2f} at batch 128" in eff.note and "predicts" in eff.note
    assert eff(64) == pytest.approx((eff.phi() + 32) / (eff.phi() + 64))  # between: the form


def test_the_noise_scale_decides_where_no_curves_compare(tmp_path):
    X, y, w = least_squares(4096)
    g = per_sample_grads(X, y, w)
    late = [e for e in events_of(128, 0.5e-5, g, 2) if e["e"] != "loss" or e["step"] > 1000]
    trials = [write_trial(tmp_path, "a", 32, events_of(32, 1e-5, g, 1)),
              write_trial(tmp_path, "b", 128, late)]
    eff = efficiency_from_trials(trials, tmp_path, ref_batch=32)
    assert eff.measured[128].value is None and eff.decided_by == "noise scale"
    assert eff.efficiency[128] == eff.prior[128]
    assert "gradient noise scale" in eff.note and "unchecked" in eff.note


def test_a_smaller_batch_that_trains_worse_at_the_scripts_rate_is_believed(tmp_path):
    """charlm in the full suite: the noise scale (about 2 samples) predicted 3.5x the progress
    per sample at batch 8 and 9x at batch 2; over the same stretch of samples the loss fell at
    0.4x and 0.01x, and the loss ruler put those batches at 53-65% regret. Measured over the same
    samples, a smaller batch's shortfall stands, and smaller batches are not assumed better."""
    X, y, w = least_squares(4096)
    g = per_sample_grads(X, y, w)
    trials = [write_trial(tmp_path, "a", 32, events_of(32, 1e-5, g, 1)),
              write_trial(tmp_path, "b", 8, events_of(8, 0.3e-5, g, 2))]
    eff = efficiency_from_trials(trials, tmp_path, ref_batch=32)
    assert eff.prior[8] > 1  # the form alone favours the smaller batch
    assert eff.decided_by == "measured progress"
    assert eff.efficiency[8] == pytest.approx(0.3, rel=0.15)
    assert "0.3" in eff.note and "at batch 8" in eff.note
    assert eff(4) <= eff.efficiency[8] and eff(2) <= eff.efficiency[8]
    assert eff(16) == pytest.approx((eff.phi() + 32) / (eff.phi() + 16))  # between: the form


def test_a_smaller_batch_over_an_earlier_stretch_does_not_raise_efficiency(tmp_path):
    """charlm for time in the issue-39 rerun: batch 8's run covered an earlier, steeper stretch
    of the loss curve than batch 32's (no samples in common), its progress per sample read 1.66x
    the script's, and the recommendation went to batch 8 at 1 CPU (158% regret on the loss
    ruler). Over different stretches a smaller batch's higher progress is not believed."""
    late = [e for e in events_of(32, 1e-5, None, 1) if e["e"] != "loss" or e["step"] > 1000]
    trials = [write_trial(tmp_path, "a", 32, late),
              write_trial(tmp_path, "b", 8, events_of(8, 1.66e-5, None, 2))]
    eff = efficiency_from_trials(trials, tmp_path, ref_batch=32)
    assert "different stretches" in eff.measured[8].why
    assert eff.decided_by == "nothing measured" and eff.efficiency == {}
    assert eff(8) == 1.0


def test_measured_progress_alone_decides_when_the_gradients_say_nothing(tmp_path):
    trials = [write_trial(tmp_path, "a", 32, events_of(32, 1e-5, None, 1)),
              write_trial(tmp_path, "b", 128, events_of(128, 0.3e-5, None, 2))]
    eff = efficiency_from_trials(trials, tmp_path, ref_batch=32)
    assert not eff.noise.ok and eff.prior == {}
    assert eff.decided_by == "measured progress"
    assert eff.efficiency[128] == pytest.approx(0.3, rel=0.1)
    assert "no noise scale" in eff.note


def test_goodput_false_compares_batches_by_samples_per_second(tmp_path):
    from optimizer.foundation.config import load_config
    from optimizer.foundation.errors import CloudoptError
    from optimizer.search.planning import measure_efficiency

    trials = [write_trial(tmp_path, "a", 32, events_of(32, 1e-5, None, 1)),
              write_trial(tmp_path, "b", 128, events_of(128, 0.3e-5, None, 2))]
    assert measure_efficiency(trials, trials[0], tmp_path).on  # measured: on by default
    off = measure_efficiency(trials, trials[0], tmp_path, goodput=False)
    assert not off.on and off(128) == 1.0 and "[run].goodput = false" in off.note
    toml = tmp_path / "c.toml"
    toml.write_text("[run]\ngoodput = false\n")
    assert load_config(toml).run.goodput is False
    toml.write_text('[run]\ngoodput = "no"\n')
    with pytest.raises(CloudoptError, match=r"\[run\]\.goodput"):
        load_config(toml)


def test_without_probe_files_efficiency_is_off(tmp_path):
    trials = [write_trial(tmp_path, "a", 32, None), write_trial(tmp_path, "b", 64, None)]
    assert probe_records(trials, tmp_path) == {}
    eff = efficiency_from_trials(trials, tmp_path, ref_batch=32)
    assert eff.decided_by == "nothing measured" and eff.efficiency == {}
    assert eff.note.startswith("Statistical efficiency is off") and "no probe records" in eff.note


# -- through the real probe ---------------------------------------------------------------------

SCRIPT = """
import os, sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

def main():
    batch, seconds, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    torch.manual_seed(batch)
    data = torch.load("data.pt", weights_only=True)
    model = torch.nn.Linear(data["w0"].numel(), 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(data["w0"].view(1, -1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    loader = DataLoader(TensorDataset(data["X"], data["y"]), batch_size=batch, shuffle=True)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for xb, yb in loader:
            if mode == "inference":
                with torch.no_grad():
                    model(xb)
                continue
            opt.zero_grad()
            residual = model(xb).squeeze(1) - yb
            if mode == "vector":
                loss = 0.5 * residual ** 2
                loss.backward(torch.ones_like(loss) / len(loss))
            elif mode == "constant":
                loss = (residual * 0).sum() + 1.0
                loss.backward()
            else:
                loss = 0.5 * (residual ** 2).mean()
                loss.backward()
            opt.step()
            time.sleep(0.001)  # waiting for data, as real loaders make a script wait
            if time.perf_counter() >= end:
                break

if __name__ == "__main__":
    main()
"""

RUNS = {  # trial id: (batch, seconds, mode, window steps)
    "lsq-16": (16, 2.5, "scalar", 256), "lsq-64": (64, 2.5, "scalar", 256),
    "constant-16": (16, 1.2, "constant", 4), "vector-32": (32, 0.5, "vector", 4),
    "inference-16": (16, 0.3, "inference", 4),
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> tuple[Path, float]:
    """The runs of :data:`RUNS`, side by side under the probe, in one run folder; and the true
    noise scale at the scripts' starting point."""
    torch = pytest.importorskip("torch")
    run_dir = tmp_path_factory.mktemp("run")
    X, y, w = least_squares(65536)
    torch.save({"X": torch.from_numpy(X), "y": torch.from_numpy(y), "w0": torch.from_numpy(w)},
               run_dir / "data.pt")
    (run_dir / "train.py").write_text(textwrap.dedent(SCRIPT))
    procs = []
    for trial_id, (batch, seconds, mode, window) in RUNS.items():
        (run_dir / "trials" / trial_id).mkdir(parents=True)
        env = probe_environment(dict(os.environ, OMP_NUM_THREADS="1",
                                     CLOUDOPT_PROBE_GRAD_WINDOW=str(window)),
                                run_dir / "trials" / trial_id / EVENTS_FILE)
        procs.append(subprocess.Popen([sys.executable, "train.py", str(batch), str(seconds),
                                       mode], cwd=run_dir, env=env, stderr=subprocess.PIPE,
                                      text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    return run_dir, true_noise_scale(per_sample_grads(X, y, w))


def trials_of(*ids: str) -> list[TrialSummary]:
    return [TrialSummary(trial_id=i, status="probe", allocation=Allocation(batch_size=RUNS[i][0]))
            for i in ids]


def test_the_noise_scale_of_a_real_script_seen_by_the_probe(probed):
    run_dir, truth = probed
    records = probe_records(trials_of("lsq-16", "lsq-64"), run_dir)
    assert sorted(records) == [16, 64]
    for batch, (rec,) in records.items():
        assert rec.windows and all(win["k"] == 256 for win in rec.windows)
        assert all(s == batch for win in rec.windows for s in win["samples"])
    est = estimate_noise_scale(records)
    assert est.value == pytest.approx(truth, rel=0.3), est
    assert est.source == "windows+batches" and est.low < est.value < est.high
    eff = efficiency_from_trials(trials_of("lsq-16", "lsq-64"), run_dir, ref_batch=16)
    assert eff.noise == est
    assert eff.prior[64] == pytest.approx((est.value + 16) / (est.value + 64))
    # The two 2.5 s runs share the cores with three others: where batch 16's curve got as low
    # as batch 64's, the measured samples to that loss decide instead (the suite's load moves
    # which); either way the value in use is the one the note names.
    if eff.decided_by == "noise scale":
        assert eff.efficiency[64] == eff.prior[64] and "gradient noise scale" in eff.note
    else:
        assert eff.decided_by == "measured progress"
        assert eff.efficiency[64] == pytest.approx(eff.measured[64].value)
        assert "samples each batch size needed" in eff.note


def test_a_constant_loss_turns_efficiency_off(probed):
    run_dir, _ = probed
    eff = efficiency_from_trials(trials_of("constant-16"), run_dir, ref_batch=16)
    assert "all zero" in eff.noise.why
    assert eff.progress[16].value == 0.0 and "did not change" in eff.progress[16].why
    assert eff.decided_by == "nothing measured" and eff.efficiency == {}
    assert "Statistical efficiency is off" in eff.note


def test_a_script_without_a_scalar_loss_has_no_progress(probed):
    run_dir, _ = probed
    records = probe_records(trials_of("vector-32"), run_dir)
    assert records[32][0].grads and not records[32][0].losses  # it trains, unseen by the loss
    eff = efficiency_from_trials(trials_of("vector-32"), run_dir, ref_batch=32)
    assert eff.progress[32].value is None and "backward()" in eff.progress[32].why
    assert "nothing to pair" in eff.noise.why  # one batch size, one window of 4 steps
    assert eff.decided_by == "nothing measured" and eff.efficiency == {}
    assert "backward()" in eff.note


def test_an_inference_only_script_measures_nothing(probed):
    run_dir, _ = probed
    eff = efficiency_from_trials(trials_of("inference-16"), run_dir, ref_batch=16)
    assert "no gradient norms" in eff.noise.why and "backward()" in eff.progress[16].why
    assert eff.decided_by == "nothing measured" and eff.efficiency == {}

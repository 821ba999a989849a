"""Engineered features and phase smoothing: scale invariance, causality, flicker removal, and
detectors with the new options through save/load."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from optimizer.foundation.errors import ModelFileError
from phases import PhaseDetector, load_default_detector
from phases.features import RATE_WINDOW, engineer_features, feature_groups, feature_names, is_causal
from phases.smoothing import enforce_min_duration, smooth_phases
from phases.synthetic import make_synthetic_traces

torch.set_num_threads(1)


def _executions(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.abs(rng.normal(1.0, 0.3, size=(n, 2))) + 0.1 for n in (30, 7, 18)]


def _engineer(arrays, spec):
    lengths = np.array([len(a) for a in arrays])
    out = engineer_features(np.concatenate(arrays), lengths, spec)
    return np.split(out, np.cumsum(lengths)[:-1])


@pytest.mark.parametrize("spec", ["rel+rel-diff+rel-rate", "whole+whole-diff+whole-rate"])
def test_relative_features_ignore_the_scale_of_one_execution(spec):
    arrays = _executions()
    scaled = [a.copy() for a in arrays]
    scaled[1] = scaled[1] * np.array([7.0, 0.01])  # a bigger job in CPU, a smaller in memory
    before, after = _engineer(arrays, spec), _engineer(scaled, spec)
    for b, a in zip(before, after, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    absolute = _engineer(scaled, "abs+" + spec)
    assert not np.allclose(absolute[1][:, :2], before[1][:, :2])  # abs does see the scale


def test_causal_features_of_a_prefix_match_the_whole_execution():
    x = _executions()[0]
    whole = _engineer([x], "rel+rel-diff+rel-rate+abs-rate")[0]
    prefix = _engineer([x[:12]], "rel+rel-diff+rel-rate+abs-rate")[0]
    np.testing.assert_allclose(prefix, whole[:12])
    assert is_causal("rel+abs-rate") and not is_causal("rel+whole-rate")
    offline = _engineer([x], "whole")[0]
    assert not np.allclose(_engineer([x[:12]], "whole")[0], offline[:12])


def test_diff_and_rate_values_and_no_leak_across_executions():
    a = np.arange(10.0)[:, None]
    b = np.full((6, 1), 100.0)
    out = _engineer([a, b], "abs+abs-diff+abs-rate")
    np.testing.assert_allclose(out[0][:, 1], [0] + [1] * 9)
    w = RATE_WINDOW
    np.testing.assert_allclose(out[0][w:, 2], 1.0)
    np.testing.assert_allclose(out[0][:w, 2], np.arange(w) / w)  # held at the first value
    assert (out[1][:, 1:] == 0).all()  # b's first sample is not differenced against a's last


def test_relative_scale_survives_zeros_and_one_spike():
    x = np.array([[0.0], [0.0], [1.0], [1.0], [50.0], [1.0], [1.0]])
    rel = _engineer([x], "rel")[0][:, 0]
    assert rel[:2].tolist() == [0.0, 0.0]  # no level yet: 0, not NaN
    assert rel[-1] == pytest.approx(1.0)  # the single spike did not become the scale
    assert np.isfinite(_engineer([np.zeros((5, 2))], "whole+rel-rate")[0]).all()


def test_feature_specification_errors_name_the_value():
    assert feature_groups(None) == ["abs"]
    assert feature_names("abs+whole-rate", ["cpu"]) == ["cpu", "whole-rate:cpu"]
    with pytest.raises(ValueError, match="'relative'"):
        feature_groups("abs+relative")
    with pytest.raises(ValueError, match="more than once"):
        feature_groups("rel+rel")
    with pytest.raises(ValueError, match="features="):
        PhaseDetector(features="abs+bogus").fit([np.ones((10, 2))])
    with pytest.raises(ValueError, match="smoothing"):
        PhaseDetector(smoothing="kalman").fit([np.ones((10, 2))])
    with pytest.raises(ValueError, match="stay_prob"):
        PhaseDetector(stay_prob=1.0).fit([np.ones((10, 2))])


def _distances(labels: list[int], k: int = 3, gap: float = 1.0) -> np.ndarray:
    d = np.full((len(labels), k), gap)
    d[np.arange(len(labels)), labels] = 0.0
    return d


@pytest.mark.parametrize("method", ["viterbi", "forward"])
def test_smoother_removes_single_sample_flickers(method):
    labels = [0] * 10 + [1] + [0] * 10 + [2] * 10 + [0] + [2] * 10
    out = smooth_phases(_distances(labels), 0.5, method=method, stay=0.99)
    expected = [0] * 21 + [2] * 21
    if method == "forward":  # causal: it follows a lasting change a few samples late
        assert int((np.diff(out) != 0).sum()) == 1 and out[0] == 0 and out[-1] == 2
        assert (out != expected).sum() <= 5
    else:
        assert out.tolist() == expected
    # an emission much sharper than the stickiness keeps every label as it is
    assert smooth_phases(_distances(labels, gap=100.0), 0.5, method=method).tolist() == labels


def test_smoother_never_invents_a_phase():
    rng = np.random.default_rng(3)
    for _ in range(50):
        d = rng.random((40, 6)) ** 3
        d[:, rng.integers(6)] += 0.3  # one phase is never nearest but often close
        nearest = set(d.argmin(1).tolist())
        for method in ("viterbi", "forward"):
            out = smooth_phases(d, rng.uniform(0.01, 1.0), method=method, stay=0.999)
            assert set(out.tolist()) <= nearest


def test_min_duration_merges_short_runs_only():
    labels = np.array([0, 0, 0, 0, 1, 0, 0, 0, 2, 2, 2, 2, 2, 1, 1])
    out = enforce_min_duration(labels, 3)
    assert out.tolist() == [0] * 8 + [2] * 5 + [1] * 2 or out.tolist() == [0] * 8 + [2] * 7
    assert min(np.diff(np.flatnonzero(np.diff(np.r_[-1, out, -1])))) >= 3
    np.testing.assert_array_equal(enforce_min_duration(labels, 1), labels)
    with pytest.raises(ValueError, match="min_duration"):
        enforce_min_duration(labels, 0)


@pytest.fixture(scope="module")
def synthetic():
    return make_synthetic_traces(6, random_state=2)


def test_detector_with_new_options_round_trips(synthetic, tmp_path):
    model = PhaseDetector(
        n_phases=3,
        epochs=5,
        random_state=0,
        device="cpu",
        features="rel+rel-rate+abs",
        smoothing="viterbi",
        stay_prob=0.95,
        min_duration=2,
    ).fit(synthetic.traces)
    assert model.crbm_.n_visible == 6 and model.emission_var_ > 0
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert meta["params"]["features"] == "rel+rel-rate+abs" and meta["emission_var"] > 0
    assert not any(p.suffix in (".pkl", ".pickle") for p in (tmp_path / "m").iterdir())
    loaded = PhaseDetector.load(tmp_path / "m")
    assert loaded.get_params() == model.get_params()
    for a, b in zip(model.predict(synthetic.traces), loaded.predict(synthetic.traces), strict=True):
        np.testing.assert_array_equal(a, b)
    plain = model.set_params(smoothing="none", min_duration=1).predict(synthetic.traces)
    runs = sum(int((np.diff(p[3:]) != 0).sum()) for p in plain)
    smoothed = sum(int((np.diff(p[3:]) != 0).sum()) for p in loaded.predict(synthetic.traces))
    assert smoothed <= runs


def test_old_meta_without_new_keys_loads_and_behaves_as_before(synthetic, tmp_path):
    model = PhaseDetector(n_phases=3, epochs=5, random_state=0, device="cpu").fit(synthetic.traces)
    model.save(tmp_path / "m")
    path = tmp_path / "m" / "meta.json"
    meta = json.loads(path.read_text())
    for key in ("features", "smoothing", "stay_prob", "min_duration"):
        del meta["params"][key]
    del meta["emission_var"]
    del meta["cluster_scales"]
    path.write_text(json.dumps(meta))
    old = PhaseDetector.load(tmp_path / "m")
    assert old.features == "abs" and old.smoothing == "none" and old.min_duration == 1
    for a, b in zip(model.predict(synthetic.traces), old.predict(synthetic.traces), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="refit"):
        old.set_params(smoothing="viterbi").predict(synthetic.traces)
    shipped = load_default_detector()
    assert shipped.features == "abs" and shipped.smoothing == "none"


def test_bad_emission_var_in_meta_is_refused(synthetic, tmp_path):
    model = PhaseDetector(n_phases=3, epochs=2, random_state=0, device="cpu").fit(synthetic.traces)
    model.save(tmp_path / "m")
    shutil.copytree(tmp_path / "m", tmp_path / "bad")
    path = tmp_path / "bad" / "meta.json"
    meta = json.loads(path.read_text())
    meta["emission_var"] = -1
    path.write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="emission_var"):
        PhaseDetector.load(tmp_path / "bad")


def test_window_weight_clusters_codes_beside_their_windows(synthetic, tmp_path):
    model = PhaseDetector(
        n_phases=3, epochs=20, random_state=0, device="cpu", window_weight=2.0
    ).fit(synthetic.traces)
    n_vis, d = model.crbm_.n_visible, model.delay
    assert model.cluster_centers_.shape == (3, model.n_hidden + (d + 1) * n_vis)
    code_scale, window_scale = model.cluster_scales_
    assert code_scale > 0 and window_scale > 0
    # Nearest centroid of [code, window] built by hand, window by window, in a Python loop.
    arrays = synthetic.traces.arrays
    codes = model.transform(arrays)
    for a, c, labels in zip(arrays, codes, model.predict(arrays), strict=True):
        z = model.scaler_.transform_flat(a)
        for j in range(len(c)):
            window = z[j : j + d + 1].T.reshape(-1)  # feature-major, as unfold lays it out
            point = np.concatenate([c[j] * code_scale, window * window_scale])
            dist = ((model.cluster_centers_ - point) ** 2).sum(1)
            assert labels[j + d] == int(dist.argmin())
    # The window carries weight: the same CRBM without it clusters differently.
    plain = PhaseDetector(n_phases=3, epochs=20, random_state=0, device="cpu").fit(synthetic.traces)
    assert plain.cluster_centers_.shape == (3, model.n_hidden)
    assert plain.cluster_scales_ == (1.0, 0.0)
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert meta["cluster_scales"] == [code_scale, window_scale]
    loaded = PhaseDetector.load(tmp_path / "m")
    for a, b in zip(model.predict(arrays), loaded.predict(arrays), strict=True):
        np.testing.assert_array_equal(a, b)
    model.expand(arrays[:2], 1)
    assert model.cluster_centers_.shape == (4, model.n_hidden + (d + 1) * n_vis)


def test_window_weight_errors(synthetic, tmp_path):
    for bad in (-1.0, float("inf"), True, "2"):
        with pytest.raises(ValueError, match="window_weight"):
            PhaseDetector(window_weight=bad, epochs=1).fit(synthetic.traces)
    model = PhaseDetector(n_phases=3, epochs=2, random_state=0, device="cpu", window_weight=1.0)
    model.fit(synthetic.traces).save(tmp_path / "m")
    for scales, match in (([1.0, 0.0], "disagree"), ([1.0], "cluster_scales"),
                          ([0.0, 1.0], "cluster_scales"), ("x", "cluster_scales")):
        shutil.rmtree(tmp_path / "bad", ignore_errors=True)
        shutil.copytree(tmp_path / "m", tmp_path / "bad")
        path = tmp_path / "bad" / "meta.json"
        meta = json.loads(path.read_text())
        meta["cluster_scales"] = scales
        path.write_text(json.dumps(meta))
        with pytest.raises(ModelFileError, match=match):
            PhaseDetector.load(tmp_path / "bad")

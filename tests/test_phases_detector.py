"""PhaseDetector: planted-phase recovery, scikit-learn contract, persistence and its safety."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import adjusted_rand_score
from sklearn.utils.estimator_checks import (
    check_no_attributes_set_in_init,
    check_parameters_default_constructible,
)

from optimizer.foundation.errors import ModelFileError
from phases import WARMUP, PhaseDetector, load_default_detector
from phases.crbm import CRBM, stack_windows
from phases.synthetic import make_synthetic_traces

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def synthetic():
    return make_synthetic_traces(8, random_state=1)


@pytest.fixture(scope="module")
def fitted(synthetic):
    return PhaseDetector(n_phases=4, epochs=30, random_state=1, device="cpu").fit(synthetic.traces)


def test_recovers_planted_phases(synthetic, fitted):
    predicted = fitted.predict(synthetic.traces)
    assert [len(p) for p in predicted] == [len(a) for a in synthetic.traces.arrays]
    p, y = np.concatenate(predicted), np.concatenate(synthetic.labels)
    scored = p != WARMUP
    assert adjusted_rand_score(y[scored], p[scored]) >= 0.9


def test_warmup_labels_and_short_executions(fitted, synthetic):
    short = synthetic.traces.arrays[0][:3]  # delay=3: no full window
    out = fitted.predict([synthetic.traces.arrays[0], short])
    assert (out[0][:3] == WARMUP).all() and (out[0][3:] >= 0).all()
    assert out[1].tolist() == [WARMUP] * 3
    codes = fitted.transform([synthetic.traces.arrays[0], short])
    assert codes[0].shape == (len(synthetic.traces.arrays[0]) - 3, 10) and codes[1].shape == (0, 10)
    assert np.all((codes[0] > 0) & (codes[0] < 1))


def test_fit_is_deterministic(synthetic):
    arrays = synthetic.traces.arrays[:3]
    a = PhaseDetector(n_phases=3, epochs=3, random_state=7, device="cpu").fit(arrays)
    b = PhaseDetector(n_phases=3, epochs=3, random_state=7, device="cpu").fit(arrays)
    assert a.loss_curve_ == b.loss_curve_
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)


def test_score_is_reconstruction_error_lower_better(synthetic, fitted):
    untrained = PhaseDetector(n_phases=4, epochs=1, lr=1e-6, random_state=1).fit(synthetic.traces)
    assert 0 < fitted.score(synthetic.traces) < untrained.score(synthetic.traces)
    assert fitted.score(synthetic.traces) == pytest.approx(fitted.loss_curve_[-1], rel=0.5)


def test_windows_match_a_python_loop():
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(n, 2)) for n in (6, 2, 4)]
    win = stack_windows(arrays, delay=2)
    expected_v, expected_u, owners = [], [], []
    for i, x in enumerate(arrays):
        for t in range(2, len(x)):
            expected_v.append(x[t])
            expected_u.append(np.concatenate([x[t - 2], x[t - 1]]))
            owners.append(i)
    np.testing.assert_allclose(win.v.numpy(), np.array(expected_v), rtol=1e-6)
    np.testing.assert_allclose(win.u.numpy(), np.array(expected_u), rtol=1e-6)
    assert win.owner.tolist() == owners
    assert win.position.tolist() == [2, 3, 4, 5, 2, 3]


def test_dataframe_input_uses_exec_id_and_numeric_columns(synthetic):
    frame = synthetic.to_frame().drop(columns="phase")
    model = PhaseDetector(n_phases=4, epochs=2, random_state=0).fit(frame, time="time_s")
    assert list(model.feature_names_in_) == ["cpu_cores", "mem_gb"]
    assert model.exec_id_col_ == "exec_id" and model.time_col_ == "time_s"
    out = model.predict(frame)
    assert len(out) == len(synthetic.traces) and len(out[0]) == len(synthetic.traces.arrays[0])


def test_sklearn_contract(fitted, synthetic):
    # parametrize_with_checks does not apply: fit takes a list of executions (2-D arrays of
    # different lengths) and predict returns one sequence per execution, not an (n_samples,)
    # array. The data-free checks and the contract itself are tested here.
    check_parameters_default_constructible("PhaseDetector", PhaseDetector())
    check_no_attributes_set_in_init("PhaseDetector", PhaseDetector())
    est = PhaseDetector(n_phases=3, epochs=2)
    assert est.get_params()["n_phases"] == 3
    est.set_params(n_hidden=4)
    twin = clone(est)
    assert twin.get_params() == est.get_params() and not hasattr(twin, "crbm_")
    with pytest.raises(NotFittedError):
        est.predict(synthetic.traces)
    assert est.fit(synthetic.traces.arrays[:2]) is est
    assert est.cluster_centers_.shape == (3, 4)
    with pytest.raises(ValueError, match="n_phases"):
        PhaseDetector(n_phases=0).fit(synthetic.traces)
    with pytest.raises(ValueError, match="features"):
        fitted.predict([np.zeros((10, 3))])


def test_expand_keeps_existing_phase_ids(synthetic):
    old = make_synthetic_traces(6, random_state=3)
    # Train without the "save" phase (id 3 in the planted labels), then expand with it.
    keep = [x[y != 3] for x, y in zip(old.traces.arrays, old.labels, strict=True)]
    model = PhaseDetector(n_phases=3, epochs=30, random_state=0).fit(keep)
    before = model.predict(keep)
    save_only = [x[y == 3] for x, y in zip(old.traces.arrays, old.labels, strict=True)]
    model.expand(save_only, 1)
    assert model.n_phases_ == 4 and model.cluster_centers_.shape[0] == 4
    after = model.predict(keep)
    agree = np.mean(np.concatenate(before) == np.concatenate(after))
    assert agree > 0.98  # old behaviour keeps its ids
    new = np.concatenate(model.predict(save_only))
    assert np.mean(new[new != WARMUP] == 3) > 0.9  # the new behaviour gets the new id


def test_save_load_predict_identical(tmp_path, fitted, synthetic):
    fitted.save(tmp_path / "m")
    assert sorted(os.listdir(tmp_path / "m")) == [
        "crbm.pt",
        "kmeans.npz",
        "meta.json",
        "scaler.json",
    ]
    loaded = PhaseDetector.load(tmp_path / "m")
    for a, b in zip(
        fitted.predict(synthetic.traces), loaded.predict(synthetic.traces), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert loaded.get_params() == fitted.get_params()
    assert loaded.score(synthetic.traces) == pytest.approx(fitted.score(synthetic.traces))


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickle_payload_refused(tmp_path, fitted):
    model_dir = fitted.save(tmp_path / "m")
    buf = io.BytesIO()
    torch.save({"W": _Evil()}, buf)
    (model_dir / "crbm.pt").write_bytes(buf.getvalue())
    with pytest.raises(ModelFileError, match="crbm.pt"):
        PhaseDetector.load(model_dir)
    (model_dir / "crbm.pt").write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(ModelFileError, match="crbm.pt"):
        PhaseDetector.load(model_dir)


def test_object_array_in_npz_refused(tmp_path, fitted):
    model_dir = fitted.save(tmp_path / "m")
    np.savez(model_dir / "kmeans.npz", cluster_centers=np.array([_Evil()], dtype=object))
    with pytest.raises(ModelFileError, match="kmeans.npz"):
        PhaseDetector.load(model_dir)


def test_corrupted_and_mismatched_models(tmp_path, fitted):
    src = fitted.save(tmp_path / "m")

    def variant(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(src, dst)
        return dst

    d = variant("truncated")
    (d / "crbm.pt").write_bytes((d / "crbm.pt").read_bytes()[:100])
    with pytest.raises(ModelFileError, match="crbm.pt"):
        PhaseDetector.load(d)
    d = variant("mismatch")
    meta = json.loads((d / "meta.json").read_text())
    meta["n_hidden"] = meta["params"]["n_hidden"] = 7
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="shape"):
        PhaseDetector.load(d)
    d = variant("nometa")
    (d / "meta.json").unlink()
    with pytest.raises(ModelFileError, match="meta.json"):
        PhaseDetector.load(d)
    d = variant("badjson")
    (d / "scaler.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="scaler.json"):
        PhaseDetector.load(d)
    with pytest.raises(ModelFileError, match="not found"):
        PhaseDetector.load(tmp_path / "nowhere")


def test_default_model_loads_and_predicts():
    model = load_default_detector(device="cpu")
    assert list(model.feature_names_in_) == ["cpu_cores", "mem_gb"]
    frame = pd.DataFrame(
        {
            "exec_id": ["a"] * 8,
            "cpu_cores": np.linspace(0.5, 2, 8),
            "mem_gb": np.linspace(0.2, 0.6, 8),
        }
    )
    out = model.predict(frame)
    assert out[0][:3].tolist() == [WARMUP] * 3
    assert set(out[0][3:]) <= set(range(model.n_phases_))


def test_crbm_rejects_bad_sizes():
    with pytest.raises(ValueError, match="delay"):
        CRBM(2, 10, 0)


def test_model_saved_for_cuda_loads_on_cpu(tmp_path, fitted, synthetic):
    model_dir = fitted.save(tmp_path / "m")
    meta = json.loads((model_dir / "meta.json").read_text())
    meta["params"]["device"] = "cuda"
    (model_dir / "meta.json").write_text(json.dumps(meta))
    loaded = PhaseDetector.load(model_dir)
    expected = "cuda" if torch.cuda.is_available() else "auto"
    assert loaded.device == expected
    np.testing.assert_array_equal(
        np.concatenate(loaded.predict(synthetic.traces)),
        np.concatenate(fitted.predict(synthetic.traces)),
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fit_predict_matches_shapes(synthetic):
    model = PhaseDetector(n_phases=4, epochs=30, random_state=1, device="cuda").fit(
        synthetic.traces
    )
    p, y = np.concatenate(model.predict(synthetic.traces)), np.concatenate(synthetic.labels)
    assert adjusted_rand_score(y[p != WARMUP], p[p != WARMUP]) >= 0.9


def test_preprocess_options(synthetic):
    arrays = synthetic.traces.arrays[:3]
    for preprocess in ("diff", "exec-norm", "exec-norm+diff"):
        model = PhaseDetector(n_phases=3, epochs=2, preprocess=preprocess, random_state=0)
        model.fit(arrays)
        n_vis = 4 if "diff" in preprocess else 2
        assert model.crbm_.n_visible == n_vis and model.scaler_.n_features == n_vis
        assert [len(p) for p in model.predict(arrays)] == [len(a) for a in arrays]
    with pytest.raises(ValueError, match="unknown step"):
        PhaseDetector(preprocess="log").fit(arrays)


def test_prepare_is_per_execution():
    model = PhaseDetector(preprocess="exec-norm+diff")
    a, b = np.array([[1.0], [3.0], [5.0]]), np.array([[10.0], [10.0]])
    out = model._prepare(np.vstack([a, b]), np.array([3, 2]))
    z = (a - 3) / np.sqrt(8 / 3)
    np.testing.assert_allclose(out[:3, 0], z[:, 0])
    np.testing.assert_allclose(out[3:, 0], [0, 0])  # constant execution: centred, not divided
    np.testing.assert_allclose(out[:, 1], [0, z[1, 0] - z[0, 0], z[2, 0] - z[1, 0], 0, 0])

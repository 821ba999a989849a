"""Every parser of a user's file gives a result or a CloudoptError naming the file, never another
exception: traces, TOML configurations, phase-model folders, trial records, JSON records.
(The offline log reader has its own fuzz tests in test_offline_reader.py.)"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optimizer.foundation.atomic_files import read_json
from optimizer.foundation.config import load_config
from optimizer.foundation.errors import CloudoptError
from optimizer.trials.records import TrialSummary
from phases import PhaseDetector
from phases.traces import read_traces

FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

CELL = st.one_of(st.text(max_size=5), st.integers(-3, 10**6).map(str),
                 st.floats(allow_nan=True, allow_infinity=True).map(repr),
                 st.sampled_from(["", "nan", "inf", "-1", "0", "1e309", "a", "1,5"]))


def _clean_call(fn, path: Path):
    """Run ``fn``; a CloudoptError must name ``path``; any other exception fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warnings are allowed; exceptions are judged
        try:
            return fn()
        except CloudoptError as exc:
            assert str(path) in str(exc) or path.name in str(exc), str(exc)
            return None


@FUZZ
@given(header=st.lists(st.sampled_from(["id", "t", "cpu", "mem", "x", ""]), max_size=5),
       rows=st.lists(st.lists(CELL, max_size=6), max_size=8))
def test_fuzzed_trace_tables(tmp_path, header, rows):
    path = tmp_path / "traces.csv"
    path.write_text(",".join(header) + "\n" + "\n".join(",".join(r) for r in rows))
    for invalid in ("refuse", "drop"):
        ts = _clean_call(lambda inv=invalid: read_traces(path, "id", ["cpu", "mem"], "t",
                                                          invalid=inv), path)
        if ts is not None:  # what was read is finite: nothing invented, nothing NaN
            assert all(np.isfinite(a).all() for a in ts.arrays)


@FUZZ
@given(data=st.binary(max_size=300))
def test_fuzzed_trace_bytes(tmp_path, data):
    path = tmp_path / "traces.csv"
    path.write_bytes(data)
    _clean_call(lambda: read_traces(path, "id", ["cpu"]), path)


VALUE = st.one_of(st.integers(-10, 10**9), st.floats(allow_nan=True, allow_infinity=True),
                  st.booleans(), st.text(max_size=8), st.lists(st.integers(-2, 9), max_size=3))
KEYS = {"run": ["agent_seconds", "baseline_samples", "probe_seconds", "refine_rounds",
                "refine_tolerance", "output_dir", "monitor_interval"],
        "resources": ["cpu_count_max", "cpu_count_min", "memory_max", "gpu_count_max",
                      "memory_step"],
        "sla": ["time_max", "cost_max", "throughput_min"],
        "nope": ["x"]}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else
                                     "-inf" if v == float("-inf") else repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    return str(v)


@FUZZ
@given(table=st.sampled_from(sorted(KEYS)), data=st.data())
def test_fuzzed_toml_settings(tmp_path, table, data):
    key = data.draw(st.sampled_from(KEYS[table]))
    value = data.draw(VALUE)
    path = tmp_path / "c.toml"
    path.write_text(f"[{table}]\n{key} = {_toml_value(value)}\n")
    config = _clean_call(lambda: load_config(path), path)
    if config is not None:
        config.validate() if hasattr(config, "validate") else None


@FUZZ
@given(text=st.text(max_size=200))
def test_fuzzed_toml_text(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    _clean_call(lambda: load_config(path), path)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    rng = np.random.default_rng(0)
    x = [rng.random((30, 2)) for _ in range(3)]
    model = PhaseDetector(n_phases=2, n_hidden=3, delay=2, epochs=2, device="cpu",
                          verbose=False).fit(x)
    return model.save(tmp_path_factory.mktemp("m") / "model")


@FUZZ
@given(name=st.sampled_from(["meta.json", "scaler.json", "kmeans.npz", "crbm.pt"]),
       data=st.binary(max_size=200), mode=st.sampled_from(["replace", "truncate", "delete"]))
def test_fuzzed_model_folder(tmp_path, saved_model, name, data, mode):
    folder = tmp_path / "model"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(saved_model, folder)
    target = folder / name
    if mode == "replace":
        target.write_bytes(data)
    elif mode == "truncate":
        target.write_bytes(target.read_bytes()[: len(data)])
    else:
        target.unlink()
    _clean_call(lambda: PhaseDetector.load(folder, device="cpu"), folder)


@FUZZ
@given(summary=st.one_of(
    st.dictionaries(st.sampled_from(["trial_id", "status", "allocation", "throughput",
                                     "wall_time_s", "mem_gb_peak", "extra"]),
                    st.one_of(VALUE, st.dictionaries(st.sampled_from(["gpus", "cpus",
                                                                      "memory_gb",
                                                                      "batch_size"]),
                                                     VALUE, max_size=4)), max_size=7),
    VALUE))
def test_fuzzed_trial_records(tmp_path, summary):
    folder = tmp_path / "trial"
    folder.mkdir(exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    _clean_call(lambda: TrialSummary.load(folder), folder)


@FUZZ
@given(data=st.binary(max_size=100))
def test_fuzzed_json_records(tmp_path, data):
    path = tmp_path / "r.json"
    path.write_bytes(data)
    _clean_call(lambda: read_json(path), path)

"""Scripts that take their batch size from their own environment variable (``--batch-size-env``):
found in the source, set per trial, recorded, resumed and written into the Kubernetes YAML."""

import ast
import json

import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.trials.script_scan import batch_knobs
from optimizer.trials.training import TrainingModuleManager, TrialRequest

PRICES = ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0)


@pytest.fixture
def envbatch(repo_root):
    return repo_root / "tests" / "data" / "tiny_envbatch_train.py"


def test_source_scan_names_the_batch_flags_and_variables():
    tree = ast.parse(
        "import os, argparse\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--lr')\np.add_argument('--train-batch-size', type=int)\n"
        "a = os.environ.get('GLOBAL_BATCH', '8')\nb = os.getenv('MICRO_BATCH')\n"
        "c = os.environ['BATCH']\nd = os.environ.get('OPTIMIZER_BATCH_SIZE')\n"
        "e = os.environ.get('HOME')\nprint('--batch is ignored here')\n")
    assert batch_knobs(tree) == {"flags": ["--train-batch-size"],
                                 "env": ["GLOBAL_BATCH", "MICRO_BATCH", "BATCH"]}


def test_a_flag_fed_to_a_loaders_batch_size_is_a_batch_knob_whatever_its_name():
    """tab_transformer.py's ``--bs`` (``DataLoader(rows, batch_size=args.bs)``): named by what
    the source does with it, so the hint tells the user which flag to hand cloudopt."""
    tree = ast.parse(
        "import argparse\nfrom torch.utils.data import DataLoader\n"
        "p = argparse.ArgumentParser()\np.add_argument('--lr', type=float)\n"
        "p.add_argument('-b', '--bs', type=int, default=64)\n"
        "p.add_argument('--chunk', dest='rows_per_step', type=int)\n"
        "args = p.parse_args()\nDataLoader([], batch_size=args.bs, shuffle=True)\n"
        "DataLoader([], batch_size=args.rows_per_step)\nprint(args.lr)\n")
    assert batch_knobs(tree) == {"flags": ["--bs", "--chunk"], "env": []}


def test_manager_sets_and_reads_the_scripts_own_variable(envbatch, monkeypatch):
    monkeypatch.delenv("BATCH_SIZE", raising=False)
    plain = TrainingModuleManager(envbatch)
    assert plain.batch_control() is None and plain.default_batch_size() is None
    assert plain.batch_knob_hint() == "--batch-size-env BATCH_SIZE"
    mgr = TrainingModuleManager(envbatch, batch_size_env="BATCH_SIZE")
    assert mgr.batch_control() == "env" and mgr.batch_knob_hint() is None
    assert mgr.default_batch_size() == 40  # the fallback in the source
    assert mgr.batch_environment(128) == {"BATCH_SIZE": "128"}
    assert mgr.batch_environment(None) == {}  # the default run leaves it alone
    monkeypatch.setenv("BATCH_SIZE", "64")  # inherited by a default run: that is its batch
    assert mgr.default_batch_size() == 64


@pytest.mark.parametrize("kw, words", [
    ({"batch_size_arg": "--bs", "batch_size_env": "BS"}, "not both"),
    ({"batch_size_env": "BATCH-SIZE"}, "not an environment variable name"),
])
def test_bad_batch_options_are_named(envbatch, kw, words):
    with pytest.raises(CloudoptError, match=words):
        TrainingModuleManager(envbatch, **kw)


def test_trial_runs_with_the_variable_and_a_changed_variable_is_measured_again(
        envbatch, tmp_path, monkeypatch):
    monkeypatch.delenv("BATCH_SIZE", raising=False)
    mgr = TrainingModuleManager(envbatch, "--samples 1200", batch_size_env="BATCH_SIZE")
    trial = tmp_path / "run" / "trials" / "00-b100"
    s = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=1.0, batch_size=100), trial,
                                      timeout_s=60), PRICES)
    assert s.status == "completed" and s.throughput > 0
    assert "ran with batch 100" in (trial / "stdout.log").read_text()
    config = json.loads((trial / "config.json").read_text())
    assert config["env"]["BATCH_SIZE"] == "100" and config["batch_env"] == {"BATCH_SIZE": "100"}
    assert mgr.recorded_trial(trial) is not None  # same setting: reused
    other = TrainingModuleManager(envbatch, "--samples 1200", batch_size_env="GLOBAL_BATCH")
    assert other.recorded_trial(trial) is None  # the script saw another variable then
    assert (tmp_path / "run" / "replaced" / "00-b100" / "summary.json").exists()
    assert "environment variable changed" in other.replaced[0]


@pytest.mark.slow
def test_main_job_varies_the_variable_and_the_k8s_yaml_sets_it(envbatch, tmp_path, repo_root):
    import yaml

    common = ["--preference", "cost", "--baseline-samples", "4", "--probe-seconds", "0",
              "--agent-seconds", "0.5", "--live-plan", "off", "--refine-rounds", "1",
              "--runoff-rounds", "1", "--quiet"]
    # The hint a run without --batch-size-env prints is manager.batch_knob_hint(), tested
    # above; a second main job only to read it cost the suite 7 s.
    out = tmp_path / "run"
    proc = run_main("--train-file", str(envbatch), "--batch-size-env", "BATCH_SIZE", *common,
                    "--output", str(out), cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (out / "main.log").read_text()
    assert "the script's default is 40" in log and "agents trained" in log
    batches = {json.loads(p.read_text())["batch_env"].get("BATCH_SIZE")
               for p in (out / "trials").glob("*/config.json")}
    assert len(batches - {None}) >= 2  # the batch size was varied through the variable
    rec = json.loads((out / "recommendation.json").read_text())
    k8s = yaml.safe_load((out / "k8s-resources.yaml").read_text())
    env = {e["name"]: e["value"] for e in k8s["env"]}
    assert "OPTIMIZER_BATCH_SIZE" not in env
    assert env["BATCH_SIZE"] == str(rec["allocation"]["batch_size"])
    assert json.loads((out / "run.json").read_text())["options"]["batch_size_env"] == "BATCH_SIZE"

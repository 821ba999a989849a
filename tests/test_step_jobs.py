"""Jobs measured in steps, and scripts that print only a training loss (issue 76): a batch is
never recommended for less training than the script's own at the length the user will run.

The case that failed: a character GPT of 300 iterations (``--trainer.max_iters``), batch 64,
only a per-batch training loss printed. Batch 4 read 7.76 times as sample-efficient from the
probes' curves and was recommended at the same 300 iterations, "to the training progress of
the script's own batch": 16 times fewer samples, and its runs ended at 2.626 against 2.503.
"""

from __future__ import annotations

import ast
import dataclasses
import math

import numpy as np
import pytest
from test_job_length import _eff

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig
from optimizer.search.choice import best_measured, objective_table, rejected_batches
from optimizer.search.goodput.batch_judge import whole_job_seconds
from optimizer.search.goodput.heldout import (
    HELDOUT,
    TRAINING,
    final_losses,
    trains_as_well,
    trains_worse,
)
from optimizer.search.goodput.job_length import JobLength, job_length, job_length_decision
from optimizer.search.goodput.length_knob import in_arguments, length_args, read_knob
from optimizer.trials.probe.events import ProbeRecord
from optimizer.trials.probe.summary import final_training_loss
from optimizer.trials.records import TrialSummary

DATACLASS_SCRIPT = """
from dataclasses import dataclass

@dataclass
class TrainerConfig:
    batch_size: int = 64
    max_iters: int = 300
    learning_rate: float = 2e-3
"""

NANOGPT_SCRIPT = """
batch_size = 12
block_size = 64
max_iters = 5000
exec(open('configurator.py').read())
"""

HF_SCRIPT = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--per_device_train_batch_size", type=int, default=8)
p.add_argument("--max_steps", type=int, default=-1)
p.add_argument("--num_train_epochs", type=float, default=3.0)
"""


# -- where the length is set ---------------------------------------------------------------
def test_steps_are_read_from_the_arguments_in_every_form_users_write():
    assert in_arguments(["--trainer.max_iters=300"], ("max_iters",))[:2] == (
        "--trainer.max_iters={}", "300")
    assert in_arguments(["--max_steps", "500"], ("max_steps",))[:2] == ("--max_steps", "500")
    assert in_arguments(["trainer.max_steps=500"], ("max_steps",))[:2] == (
        "trainer.max_steps={}", "500")
    assert in_arguments(["+trainer.max_steps=40"], ("max_steps",))[:2] == (
        "+trainer.max_steps={}", "40")
    # a later override wins, as in every parser that reads them in order
    later = in_arguments(["cfg.py", "--max_iters=100", "--max_iters=250"], ("max_iters",))
    assert later[1] == "250"
    assert in_arguments(["--max_steps", "-1"], ("max_steps",)) is None  # HF: "use epochs"
    assert in_arguments(["--eval_steps", "50"], ("max_steps", "steps")) is None


def test_a_job_of_steps_is_known_from_the_source_and_set_like_the_batch():
    tree = ast.parse(DATACLASS_SCRIPT)
    knob = read_knob(tree, [], batch_flag="--trainer.batch_size={}")
    assert (knob.unit, knob.value, knob.flag) == ("steps", 300.0, "--trainer.max_iters={}")
    assert "max_iters = 300" in knob.source
    # without a batch flag to copy, the job is still one of steps, its length not settable
    bare = job_length(tree, [])
    assert bare.unit == "steps" and bare.length == 300.0 and not bare.settable
    nano = job_length(ast.parse(NANOGPT_SCRIPT), [], batch_flag="--batch_size={}")
    assert (nano.unit, nano.length, nano.flag) == ("steps", 5000.0, "--max_iters={}")
    given = job_length(ast.parse(NANOGPT_SCRIPT), ["cfg.py", "--max_iters=800"])
    assert given.length == 800.0 and given.flag == "--max_iters={}" and given.settable


def test_steps_given_in_the_arguments_override_epochs_and_minus_one_means_epochs():
    tree = ast.parse(HF_SCRIPT)
    assert job_length(tree, []).unit == "epochs"  # max_steps -1: the epochs decide
    steps = job_length(tree, ["--max_steps", "200"])
    assert (steps.unit, steps.length, steps.flag) == ("steps", 200.0, "--max_steps")
    named = job_length(tree, [], steps_flag="--max_steps")
    assert named.unit == "steps" and not named.settable  # no positive value anywhere


def test_the_arguments_that_set_a_length():
    assert length_args("--max_iters={}", 620.0, False) == ["--max_iters=620"]
    assert length_args("--epochs", 3.0, False) == ["--epochs", "3"]
    assert length_args("trainer.max_steps={}", 90.0, False) == ["trainer.max_steps=90"]
    assert length_args("--num_train_epochs", 1.6, True) == ["--num_train_epochs", "1.6"]


# -- progress at the script's own length ----------------------------------------------------
def test_at_the_same_steps_a_smaller_batch_makes_less_progress():
    steps = JobLength("--trainer.max_iters={}", 300.0, unit="steps")
    assert steps.progress(7.76, 4 / 64) == pytest.approx(0.485)
    assert steps.length_for(steps.progress(7.76, 4 / 64)) == 619.0
    # judged whole (no way to lengthen it) it is set aside, whatever it costs
    whole = JobLength(None, 300.0, unit="steps")
    assert math.isinf(whole.job_seconds(5.4, 2.0, steps.progress(7.76, 4 / 64), False)[0])
    # a job of epochs makes the same samples at every batch: efficiency alone
    assert JobLength("--epochs", 4.0).progress(1.4, 0.5) == 1.4


def _trial(name, batch, seconds, status="completed", *, per_step=None, loss=None, se=0.0):
    probe = {"samples_per_step": per_step or batch}
    if loss is not None:
        probe.update(loss_final=loss, loss_final_se=se)
    return TrialSummary(name, status, Allocation(0, 1, 2.0, batch), wall_time_s=seconds,
                        samples=300.0 * batch, throughput=300.0 * batch / (seconds - 2.5),
                        total_samples=300.0 * 64, predicted_total_time_s=seconds,
                        hourly_cost=0.04, startup_s=2.0, exit_s=0.5, probe=probe)


def test_issue_76_the_small_batch_at_the_same_steps_is_never_recommended():
    own = _trial("own", 64, 12.0)
    small = TrialSummary("small", "probe", Allocation(0, 1, 2.0, 4), wall_time_s=6.0,
                         samples=800.0, throughput=400.0, total_samples=300.0 * 64,
                         predicted_total_time_s=2.0 + 19200 / 400 + 0.5, hourly_cost=0.04,
                         startup_s=2.0, exit_s=0.5, probe={"samples_per_step": 4})
    # the probe's whole job at its own batch: 300 steps of 4 samples, not the own batch's 19200
    job = JobLength(None, 300.0, source="max_iters = 300 in the script's source", unit="steps")
    assert whole_job_seconds(small, small.predicted_total_time_s, job) == pytest.approx(5.5)
    config = OptimizerConfig()
    eff = _eff({4: 7.76}, job)
    table = objective_table([own, small], config, "cost", eff)
    assert list(table["trial_id"]) == ["own"]
    best, _ = best_measured([own, small], config, "cost", efficiency=eff)
    assert best.trial_id == "own"
    why = rejected_batches([own, small], eff, cheaper_than=1.0)
    assert "makes 0.48 of the own batch's training" in why[4]
    assert "length cannot be set" in why[4]
    # where the steps can be set, it runs the steps that make up the difference, and says so
    settable = JobLength("--trainer.max_iters={}", 300.0, unit="steps")
    eff = _eff({4: 7.76}, settable)
    row = objective_table([own, small], config, "cost", eff).set_index("trial_id").loc["small"]
    assert row["length"] == 619.0
    assert row["job_time_s"] == pytest.approx(2.5 + 3.0 * 619 / 300)
    decision = job_length_decision(settable, row.to_dict(), eff)
    assert decision["args"] == ["--trainer.max_iters=619"]
    assert "619 steps (--trainer.max_iters=619), more than the script's 300" in decision["note"]
    assert "times 0.0625 the samples per step" in decision["note"]


def test_a_bigger_batch_at_the_same_steps_may_run_fewer():
    """At the same steps batch 128 trains on twice the samples; at an efficiency of 0.8 its
    whole job makes 1.6 of the own batch's training, so 188 of the 300 steps reach it."""
    own, big = _trial("own", 64, 12.0), _trial("big", 128, 16.0)
    job = JobLength("--max_iters={}", 300.0, unit="steps")
    row = objective_table([own, big], OptimizerConfig(), "cost",
                          _eff({128: 0.8}, job)).set_index("trial_id").loc["big"]
    assert row["progress"] == pytest.approx(1.6) and row["length"] == 188.0


# -- whole runs that print only a training loss ---------------------------------------------
def test_whole_runs_are_judged_by_their_smoothed_training_loss():
    runs = [_trial("own-a", 64, 12.0, loss=2.503, se=0.004),
            _trial("own-b", 64, 12.1, loss=2.505, se=0.004),
            _trial("small", 4, 5.4, loss=2.626, se=0.02),
            _trial("near", 32, 8.0, loss=2.507, se=0.003),
            _trial("noisy", 16, 7.0, loss=2.51, se=0.03)]
    kind, losses = final_losses(runs, 64)
    assert kind == TRAINING and losses[64][0] == pytest.approx(2.504)
    assert set(trains_worse(runs, 64)) == {4}
    # as well only beyond twice the standard error of the difference: 16's mean is too noisy
    assert set(trains_as_well(runs, 64)) == {32}
    why = rejected_batches(runs, _eff({4: 7.76}, JobLength(None, 300.0, unit="steps")))
    assert why[4] == ("its whole runs ended at a training loss over the last tenth of steps "
                      "of 2.626 against the own batch's 2.504")
    # a printed held-out loss decides over the training loss where the own batch has one
    held = [_trial("own", 64, 12.0, loss=2.5), _trial("small", 4, 5.0, loss=2.9)]
    held[0].model_info["heldout_loss"], held[1].model_info["heldout_loss"] = 1.0, 1.0
    assert final_losses(held, 64)[0] == HELDOUT and trains_worse(held, 64) == {}


def test_the_training_loss_at_a_runs_end_is_a_mean_of_its_last_readings():
    rec = ProbeRecord(header={})
    values = np.r_[np.linspace(4.0, 2.6, 90), 2.5 + 0.1 * (-1.0) ** np.arange(10)]
    rec.losses = [(float(i + 1) * 3, 0.1 * i, float(v)) for i, v in enumerate(values)]
    out = final_training_loss(rec)
    assert out["loss_final_readings"] == 11  # steps 270-300: the last tenth
    assert out["loss_final"] == pytest.approx(float(values[-11:].mean()), abs=1e-6)
    assert 0 < out["loss_final_se"] < 0.05
    assert final_training_loss(ProbeRecord(header={})) == {}


def test_with_efficiency_off_a_job_of_steps_still_counts_each_batchs_samples():
    """Without an efficiency (nothing measured, or ``[run].goodput = false``) a job of steps
    at batch 32 is still half the own batch's samples: never claimed as the same job."""
    own, small = _trial("own", 64, 12.0), _trial("small", 32, 7.0)
    job = JobLength(None, 300.0, unit="steps")

    off = _eff({}, job, on=False)  # the script's own batch 64
    table = objective_table([own, small], OptimizerConfig(), "cost", off)
    assert list(table["trial_id"]) == ["own"]  # 0.5 of the training, length not settable
    # the script's own batch unknown: only its own runs are kept, the others cannot be judged
    default = TrialSummary("default", "completed", Allocation(0, 1, 2.0, None), wall_time_s=12.0,
                           samples=19200.0, throughput=1600.0, hourly_cost=0.04)
    off = dataclasses.replace(off, ref_batch=0)
    table = objective_table([default, small], OptimizerConfig(), "cost", off)
    assert list(table["trial_id"]) == ["default"]


# -- the length read where the scripts people run most keep it ------------------------------
def _script(tmp_path, name, source):
    from optimizer.trials.script_scan import load_script

    path = tmp_path / name
    path.write_text(source)
    return load_script(path)


def test_the_length_is_read_from_the_config_files_a_run_reads(tmp_path):
    yaml = pytest.importorskip("yaml")
    # LightningCLI: --config cfg.yaml, dotted flags after it
    cli = _script(tmp_path, "cli.py", "from lightning.pytorch.cli import LightningCLI\n")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(
        {"trainer": {"max_steps": 300, "max_epochs": -1}, "data": {"batch_size": 64}}))
    args = ["fit", "--config", str(tmp_path / "cfg.yaml")]
    job = job_length(cli.tree, args, batch_flag="--data.batch_size", script=cli)
    assert (job.unit, job.length, job.flag) == ("steps", 300.0, "--trainer.max_steps")
    assert "trainer.max_steps in" in job.source
    # a later dotted override wins over the file
    job = job_length(cli.tree, [*args, "--trainer.max_steps", "120"],
                     batch_flag="--data.batch_size", script=cli)
    assert job.length == 120.0
    # Hydra: the primary config of @hydra.main, set again by key=value
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(yaml.safe_dump(
        {"data": {"batch_size": 32}, "trainer": {"max_epochs": 5}}))
    hydra = _script(tmp_path, "hydra_app.py", "import hydra\n\n"
                    "@hydra.main(config_path='conf', config_name='config', version_base=None)\n"
                    "def main(cfg):\n    pass\n")
    job = job_length(hydra.tree, [], batch_flag="data.batch_size={}", script=hydra)
    assert (job.unit, job.length, job.flag) == ("epochs", 5.0, "trainer.max_epochs={}")
    # nanoGPT: a positional Python config over the script's globals
    (tmp_path / "tiny.py").write_text("batch_size = 16\nmax_iters = 250\n")
    nano = _script(tmp_path, "train.py", NANOGPT_SCRIPT)
    job = job_length(nano.tree, [str(tmp_path / "tiny.py")], batch_flag="--batch_size={}",
                     script=nano)
    assert (job.unit, job.length, job.flag) == ("steps", 250.0, "--max_iters={}")


def test_dataclass_configs_give_the_defaults_of_batch_and_steps(tmp_path):
    from optimizer.trials.batch import script_default_batch

    dotted = _script(tmp_path, "char.py", DATACLASS_SCRIPT)
    found = script_default_batch(dotted, [], "--trainer.batch_size={}", None)
    assert found.value == 64 and "TrainerConfig.batch_size" in found.source
    assert script_default_batch(dotted, ["--trainer.batch_size=8"], "--trainer.batch_size={}",
                                None).value == 8
    hf = _script(tmp_path, "hf.py", """
from dataclasses import dataclass, field
from transformers import HfArgumentParser, TrainingArguments

@dataclass
class Args(TrainingArguments):
    per_device_train_batch_size: int = field(default=16)
    max_steps: int = field(default=300)

args, = HfArgumentParser((Args,)).parse_args_into_dataclasses()
""")
    assert script_default_batch(hf, [], "--per_device_train_batch_size", None).value == 16
    job = job_length(hf.tree, [], batch_flag="--per_device_train_batch_size", script=hf)
    assert (job.unit, job.length, job.flag) == ("steps", 300.0, "--max_steps")
    # a plain flag of an argparse script is not looked for in unrelated classes
    plain = _script(tmp_path, "plain.py", "class Cfg:\n    batch_size: int = 9\n")
    assert script_default_batch(plain, [], "--batch_size", None) is None


def test_a_named_steps_setting_in_any_form(tmp_path):
    yaml = pytest.importorskip("yaml")
    script = _script(tmp_path, "s.py", "import sys\n")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({"train": {"iters": 400}}))
    args = ["--cfg", str(tmp_path / "cfg.yaml")]
    job = job_length(script.tree, args, steps_flag=f"{tmp_path / 'cfg.yaml'}:train.iters",
                     script=script)
    assert (job.unit, job.length) == ("steps", 400.0)
    assert length_args("cfg.yaml:train.iters", 500.0, False) == []  # a file: no argument
    hydra = job_length(script.tree, ["trainer.max_steps=90"], steps_flag="trainer.max_steps={}",
                       script=script)
    assert (hydra.length, hydra.flag) == (90.0, "trainer.max_steps={}")
    assert not job_length(script.tree, [], steps_flag="--steps", script=script).settable

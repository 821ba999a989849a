"""The scoring of the scripts-from-the-wild benchmark (``benchmarks/wild_score.py``, and the
argument and recommendation handling of ``benchmarks/wild.py``): no training runs."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from wild_score import (  # noqa: E402
    CellRuns,
    Prices,
    Setting,
    abba_order,
    cell_trains_as_well,
    claim_error,
    load_corpus,
    loss_from_json,
    loss_from_text,
    markdown_table,
    objective,
    optimum,
    overhead,
    regret,
    regret_summary,
    target_loss,
    trains_as_well,
)

PRICES = Prices(cpu_hour=3.6, gb_hour=0.0)  # a CPU-second costs a tenth of a cent


def cell(cpus: int, batch: int, time_s: float, loss: float | None, peak: float = 1.0,
         extra: tuple[str, ...] = ()) -> CellRuns:
    return CellRuns(Setting(cpus, batch, extra), [time_s], [peak], [loss])


GRID = [
    cell(1, 64, 100.0, 0.50),   # the script's own batch on 1 CPU: L0 there = 0.50
    cell(2, 64, 60.0, 0.52),    # own batch, 2 CPUs (other threads, other sums): L0 = 0.52
    cell(1, 128, 70.0, 0.506),  # 1.2% above its own batch on 1 CPU (> 0.505): trains worse
    cell(2, 128, 40.0, 0.525),  # within 1% of 0.52 (<= 0.5252): trains as well
    cell(1, 32, 150.0, 0.40),
    cell(2, 32, 90.0, 0.41),
]


def judge_grid(c: CellRuns) -> bool | None:
    return cell_trains_as_well(c, GRID, 64)


def test_target_loss_is_the_own_batch_on_as_many_cpus_else_the_mean():
    assert target_loss(GRID, 64, 1) == pytest.approx(0.50)
    assert target_loss(GRID, 64, 2) == pytest.approx(0.52)
    assert target_loss(GRID, 64) == pytest.approx(0.51)  # no CPU count: the mean
    assert target_loss(GRID, 64, 4) == pytest.approx(0.51)  # no own cell on 4 CPUs: the mean
    # a cell with extra arguments (a recommended epoch count) is not the script's own job
    assert target_loss([*GRID, cell(1, 64, 10.0, 9.0, extra=("--epochs", "1"))],
                       64, 1) == pytest.approx(0.50)
    assert target_loss([cell(1, 64, 1.0, None)], 64) is None


def test_trains_as_well_allows_one_percent():
    assert trains_as_well(0.5151, 0.51)
    assert not trains_as_well(0.5152, 0.51)
    assert trains_as_well(0.1, 0.51)
    assert trains_as_well(None, 0.51) is None
    assert trains_as_well(0.5, None) is None


def test_the_own_batch_trains_as_well_as_itself_whatever_its_threads_do():
    # accelerate_loop's figures: the own batch at 0.0145 on 1 CPU and 0.0141 on 2; by the
    # mean of the two (0.0143) the own batch on 1 CPU was 1.4% worse than itself
    grid = [cell(1, 64, 8.6, 0.0145), cell(2, 64, 6.0, 0.0141), cell(1, 128, 8.1, 0.0169)]
    assert cell_trains_as_well(grid[0], grid, 64) and cell_trains_as_well(grid[1], grid, 64)
    assert not trains_as_well(0.0145, target_loss(grid, 64))
    assert not cell_trains_as_well(grid[2], grid, 64)


def test_optimum_skips_cells_that_train_worse():
    cost_best = optimum(GRID, judge_grid, "cost", PRICES)
    # cost = cpus x time: (1,64)=100, (2,64)=120, (1,128)=70 but trains worse than the own
    # batch on 1 CPU, (2,128)=80, (1,32)=150, (2,32)=180
    assert cost_best.setting == Setting(2, 128)
    assert objective(cost_best, "cost", PRICES) == pytest.approx(0.08)
    time_best = optimum(GRID, judge_grid, "time", PRICES)
    assert time_best.setting == Setting(2, 128)
    worse = [c if c.setting != Setting(2, 128) else cell(2, 128, 40.0, 0.53) for c in GRID]
    assert optimum(worse, lambda c: cell_trains_as_well(c, worse, 64), "cost", PRICES).setting == Setting(1, 64)
    assert optimum(worse, lambda c: cell_trains_as_well(c, worse, 64), "time", PRICES).setting == Setting(2, 64)
    assert optimum([cell(1, 64, 1.0, None)], lambda c: None, "cost", PRICES) is None


def test_cost_prices_memory_at_the_peak_or_the_request():
    prices = Prices(cpu_hour=0.0, gb_hour=3.6)
    c = cell(1, 64, 10.0, 0.5, peak=2.0)
    assert objective(c, "cost", prices) == pytest.approx(0.02)
    assert objective(c, "cost", prices, memory_gb=4.0) == pytest.approx(0.04)
    with pytest.raises(ValueError):
        objective(c, "balanced", prices)


def test_regret_and_claim_error():
    assert regret(0.07, 0.07) == 0.0
    assert regret(0.105, 0.07) == pytest.approx(0.5)
    assert math.isinf(regret(1.0, 0.0))
    assert claim_error(90.0, 100.0) == pytest.approx(-0.1)
    assert claim_error(120.0, 100.0) == pytest.approx(0.2)
    assert claim_error(None, 100.0) is None
    assert claim_error(1.0, 0.0) is None


def test_loss_from_text_takes_the_last_match():
    out = ("epoch 0 loss 1.9290 acc 0.6225\n| end of epoch 1 | valid loss 5.01 |\n"
           "test_loss: 1.9329\ntest_loss: 0.8123\ntest_acc: 0.62\n")
    assert loss_from_text(out, r"test_loss: ([0-9.eE+-]+)") == pytest.approx(0.8123)
    assert loss_from_text(out, r"valid loss\s+([0-9.]+)") == pytest.approx(5.01)
    assert loss_from_text(out, r"val_loss = ([0-9.e+-]+)") is None
    assert loss_from_text("val_loss = 3.2e-04\n", r"val_loss = ([0-9.e+-]+)") == pytest.approx(
        3.2e-4)
    assert loss_from_text("loss nan\n", r"loss (\S+)") == math.inf  # diverged: trains worse
    assert loss_from_text("loss -\n", r"loss (\S+)") is None
    assert not trains_as_well(loss_from_text("loss nan\n", r"loss (\S+)"), 0.51)


def test_loss_from_json(tmp_path):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"eval": {"loss": 0.25}, "loss": 1.5, "bad": "x"}))
    assert loss_from_json(p, "loss") == 1.5
    assert loss_from_json(p, "eval.loss") == 0.25
    assert loss_from_json(p, "eval.missing") is None
    assert loss_from_json(p, "bad") is None
    assert loss_from_json(tmp_path / "absent.json", "loss") is None
    (tmp_path / "torn.json").write_text('{"loss": 1.')
    assert loss_from_json(tmp_path / "torn.json", "loss") is None


def test_abba_order_and_overhead():
    assert abba_order(1) == [False, True, True, False]
    assert abba_order(2) == [False, True, True, False] * 2
    order = abba_order(3)
    assert order.count(True) == order.count(False) == 6
    assert overhead([10.0, 12.0, 11.0], [11.0, 13.2, 12.1]) == pytest.approx(0.1)
    assert overhead([], [1.0]) is None


def test_setting_names():
    assert Setting(2, 64).key() == "c2-b64"
    assert Setting(1, 128, ("--epochs", "3")).key() == "c1-b128_--epochs_3"
    assert Setting(1, 128, ("--epochs", "3")).label() == "1×128, --epochs 3"


def test_regret_summary_and_table():
    assert regret_summary([0.1, None, 0.3, 0.0]) == (pytest.approx(0.1), 0.3)
    assert regret_summary([None]) == (None, None)
    rows = [{"script": "a", "exit": 0, "fitted": True, "agents": False, "pick": "1×128",
             "pick_loss": 0.5, "l0": 0.51, "pick_trains_as_well": True, "regret": 0.25,
             "claim_time": -0.1, "claim_cost": None, "probe_time": 0.02, "probe_memory": 0.1},
            {"script": "b", "exit": "skipped"}]
    text = markdown_table(rows)
    assert "| a | 0 | yes | no | 1×128 | yes (0.5 vs 0.51) | +25.0% | -10.0% | - | +2.0% |" \
        in text
    assert "| b | skipped | - |" in text
    assert "regret over 1 scripts: median +25.0%, worst +25.0%" in text


def test_load_corpus(tmp_path):
    (tmp_path / "s.py").write_text("")
    (tmp_path / "corpus.toml").write_text(
        '[plain]\nscript = "s.py"\nframework = ""\nbatch_flag = "--bs"\ndefault_batch = 64\n'
        'epochs_flag = "--epochs"\ndefault_epochs = 5\nloss = "test_loss: (\\\\S+)"\n'
        'quick_args = ["--epochs", 1]\n'
        '[silent]\nscript = "s.py"\nbatch_flag = "--batch"\ndefault_batch = 8\n'
        'loss_file_flag = "--out"\nloss_key = "loss"\n')
    plain, silent = load_corpus(tmp_path / "corpus.toml", tmp_path / "elsewhere")
    assert plain.script == tmp_path / "s.py" and plain.default_epochs == 5.0
    assert plain.quick_args == ["--epochs", "1"] and plain.loss == "test_loss: (\\S+)"
    assert silent.loss is None and silent.loss_file_flag == "--out" and silent.epochs_flag is None


def test_with_args_replaces_the_flags_given_again():
    from wild_score import with_args

    assert with_args(["--epochs", "5", "--n", "3"], ["--epochs", "2"]) == [
        "--n", "3", "--epochs", "2"]
    assert with_args(["--epochs=5", "--n", "3"], ["--epochs", "2"]) == [
        "--n", "3", "--epochs", "2"]
    assert with_args(["--n", "3"], []) == ["--n", "3"]


def test_read_recommendation(tmp_path):
    from wild_score import WildScript, read_recommendation

    s = WildScript("x", tmp_path / "s.py", "--bs", 64, epochs_flag="--epochs", default_epochs=5)
    assert read_recommendation(tmp_path, s) == {"recommendation": None}
    rec = {"allocation": {"gpus": 0, "cpus": 2, "memory_gb": 0.75, "batch_size": None},
           "job_length": {"args": ["--epochs", "3"]},
           "measured": {"job_time_s": 12.5, "job_cost": 0.001, "time_is": "measured"},
           "workload_fit": {"n_trials": 7, "r2_throughput": 0.9}, "agent": "reinforce",
           "policies": [{"name": "reinforce", "share_of_optimum": 0.98, "episodes": 900},
                        {"name": "best-static", "share_of_optimum": 1.0, "episodes": 0}]}
    (tmp_path / "recommendation.json").write_text(json.dumps(rec))
    got = read_recommendation(tmp_path, s)
    assert got["setting"] == Setting(2, 64, ("--epochs", "3"))  # None: the script's own batch
    assert (got["claimed_time_s"], got["claimed_cost"], got["claim_from"]) == (
        12.5, 0.001, "measured")
    assert got["fitted"] and got["fit_r2"] == 0.9 and got["memory_gb"] == 0.75
    assert got["agents"] and got["agent_shares"] == {"reinforce": 0.98}


def test_read_recommendation_without_measured_or_job_length(tmp_path):
    """The recommendation.json cloudopt writes today: the claim from the run-off's winner,
    else the final trial; the epochs from the Kubernetes job's arguments."""
    from wild_score import WildScript, read_recommendation

    s = WildScript("x", tmp_path / "s.py", "--bs", 64, epochs_flag="--epochs", default_epochs=5)
    rec = {"allocation": {"gpus": 0, "cpus": 1, "memory_gb": 0.5, "batch_size": 128},
           "workload_fit": None, "policies": [{"name": "best-static", "episodes": 0}],
           "runoff_standings": [{"job_time_s": 3.4, "job_cost": 6e-5}],
           "predicted_vs_measured": {"job_time_s": {"measured": 3.3},
                                     "job_cost": {"measured": 9e-5}}}
    (tmp_path / "recommendation.json").write_text(json.dumps(rec))
    (tmp_path / "k8s-resources.yaml").write_text(
        'name: "r"\nargs:\n  - "--epochs"\n  - "2"\n  - "--bs"\n  - "128"\nenv:\n')
    got = read_recommendation(tmp_path, s, ["--epochs", "2"])
    assert got["setting"] == Setting(1, 128)  # the epochs cloudopt was given: no change
    assert (got["claimed_time_s"], got["claimed_cost"]) == (3.4, 6e-5)
    assert not got["fitted"] and not got["agents"]
    assert read_recommendation(tmp_path, s)["setting"] == Setting(1, 128, ("--epochs", "2"))
    rec["runoff_standings"] = []
    rec["goodput"] = {"comparison": [
        {"role": "the script's own batch", "time_to_same_progress_s": 5.8},
        {"role": "recommended", "time_to_same_progress_s": 2.5, "cost_to_same_progress": 2e-5}]}
    (tmp_path / "recommendation.json").write_text(json.dumps(rec))
    got = read_recommendation(tmp_path, s, ["--epochs=2"])
    assert (got["claimed_time_s"], got["claimed_cost"], got["claim_from"]) == (
        2.5, 2e-5, "goodput")
    assert got["setting"] == Setting(1, 128)
    del rec["goodput"]
    (tmp_path / "recommendation.json").write_text(json.dumps(rec))
    got = read_recommendation(tmp_path, s)
    assert (got["claimed_time_s"], got["claimed_cost"], got["claim_from"]) == (
        3.3, 9e-5, "predicted_vs_measured")


# ------------------------------------------------------------------------------ command lines
MANIFEST = ROOT / "examples" / "wild" / "corpus.toml"
WILD_DIR = ROOT / "examples" / "wild"


def corpus() -> dict:
    return {s.name: s for s in load_corpus(MANIFEST, ROOT)}


def test_arg_key_names_flags_and_hydra_overrides():
    from wild_score import arg_key

    assert arg_key("--epochs") == arg_key("--epochs=3") == "--epochs"
    assert arg_key("data.batch_size=64") == "data.batch_size"
    assert arg_key("+trainer.log_every=10") == arg_key("++trainer.log_every=1") == \
        "trainer.log_every"
    assert arg_key("-1") is None and arg_key("-1.5e-3") is None  # values, not flags
    assert arg_key("64") is None and arg_key("fit") is None
    assert arg_key("/tmp/a=b/c.py") is None  # a path is not an override


def test_flag_args_in_each_form():
    from wild_score import flag_args

    assert flag_args("--bs", 64) == ["--bs", "64"]
    assert flag_args("--batch_size={}", 64) == ["--batch_size=64"]
    assert flag_args("data.batch_size={}", 64) == ["data.batch_size=64"]
    assert flag_args("--bs={batch_size}", 8) == ["--bs=8"]
    assert flag_args("--max_iters={}", 300.0) == ["--max_iters=300"]  # not 300.0: an int flag
    assert flag_args("--epochs", 1.5) == ["--epochs", "1.5"]


def test_with_args_replaces_templates_and_overrides():
    from wild_score import with_args

    assert with_args(["cfg.py", "--max_iters=40", "--eval_interval=20"], ["--max_iters=80"]) == [
        "cfg.py", "--eval_interval=20", "--max_iters=80"]
    assert with_args(["trainer.max_epochs=1", "data.n_train=2000"],
                     ["trainer.max_epochs=3"]) == ["data.n_train=2000", "trainer.max_epochs=3"]
    assert with_args(["+trainer.max_epochs=1"], ["trainer.max_epochs=3"]) == [
        "trainer.max_epochs=3"]
    # a flag given with a space loses its value, one given with "=" is one argument
    assert with_args(["fit", "--trainer.max_steps", "60", "--data.n_train", "2000"],
                     ["--trainer.max_steps", "300"]) == [
        "fit", "--data.n_train", "2000", "--trainer.max_steps", "300"]
    # a negative value is not taken for a flag of its own
    assert with_args(["--max_epochs", "-1", "--n", "3"], ["--n", "4"]) == [
        "--max_epochs", "-1", "--n", "4"]


def test_load_corpus_reads_the_new_keys(tmp_path):
    (tmp_path / "s.py").write_text("")
    (tmp_path / "cfg.py").write_text("batch_size = 32\n")
    (tmp_path / "corpus.toml").write_text(
        '[steps]\nscript = "s.py"\nframework = "lightning,jsonargparse"\n'
        'batch_flag = "--batch_size={}"\ndefault_batch = 32\n'
        'steps_flag = "--max_iters={}"\ndefault_steps = 250\n'
        'base_args = ["{here}/cfg.py"]\ndefaults_in = "cfg.py"\n'
        'train_loss = "iter \\\\d+: loss (\\\\S+)"\n'
        '[list]\nscript = "s.py"\nframework = ["a", "b"]\nbatch_flag = "--bs"\n'
        'default_batch = 8\nepochs_flag = "--epochs"\ndefault_epochs = 2\nloss = "x (\\\\S+)"\n')
    steps, listed = load_corpus(tmp_path / "corpus.toml", tmp_path / "elsewhere")
    assert steps.base_args == [f"{tmp_path.resolve()}/cfg.py"]
    assert steps.defaults_in == tmp_path / "cfg.py"
    assert (steps.length_flag, steps.default_length, steps.length_unit) == (
        "--max_iters={}", 250.0, "steps")
    assert steps.loss == "iter \\d+: loss (\\S+)" and steps.loss_kind == "train"
    assert steps.modules() == ["lightning", "jsonargparse"]
    assert listed.modules() == ["a", "b"] and listed.loss_kind == "held-out"
    assert (listed.length_flag, listed.default_length, listed.length_unit) == (
        "--epochs", 2.0, "epochs")


def test_run_args_for_every_form_of_the_corpus():
    """The command line of a grid cell at batch B and length L, for each new form."""
    from wild_score import WildScript, run_args

    c = corpus()
    here = str(WILD_DIR.resolve())
    s = c["char_gpt_steps"]
    assert run_args(s, 4, 300) == ["--trainer.max_iters=300", "--trainer.batch_size=4"]
    assert run_args(s, 16, base=s.quick_args) == [
        "--trainer.max_iters=60", "--data.n_chars=20000", "--trainer.batch_size=16"]
    assert run_args(s, 16, 120, base=s.quick_args) == [
        "--data.n_chars=20000", "--trainer.max_iters=120", "--trainer.batch_size=16"]
    s = c["gpt_configurator"]  # the config file stays first, positional
    assert run_args(s, 16, 500, base=s.quick_args) == [
        f"{here}/config/train_tiny_char.py", "--eval_interval=20", "--dataset_chars=20000",
        "--max_iters=500", "--batch_size=16"]
    assert run_args(s) == [f"{here}/config/train_tiny_char.py"]
    s = c["hydra_style"]  # no dashes
    assert run_args(s, 128, 2, base=s.quick_args) == [
        "data.n_train=2000", "trainer.max_epochs=2", "data.batch_size=128"]
    s = c["lightning_cli"]  # the subcommand and --config before every override
    assert run_args(s, 32, 600) == [
        "fit", "--config", f"{here}/conf/lightning_cli.yaml", "--trainer.max_steps", "600",
        "--data.batch_size", "32"]
    assert run_args(s, 32, base=s.quick_args)[:3] == [
        "fit", "--config", f"{here}/conf/lightning_cli.yaml"]
    s = c["hf_trainer_steps"]
    assert run_args(s, 8, 100, base=s.quick_args) == [
        "--eval_steps", "15", "--train_tokens", "20000", "--max_eval_samples", "64",
        "--max_steps", "100", "--per_device_train_batch_size", "8"]
    s = c["torchvision_ref"]
    assert run_args(s, 64, 2) == ["--epochs", "2", "--batch-size", "64"]
    # a recommendation's length arguments (Setting.extra) replace the quick job's
    s = c["hydra_style"]
    assert run_args(s, 64, base=s.quick_args, extra=["trainer.max_epochs=4"]) == [
        "data.n_train=2000", "trainer.max_epochs=4", "data.batch_size=64"]
    with pytest.raises(ValueError):  # a length for a script whose length cannot be set
        run_args(WildScript("x", Path("x.py"), "--bs", 8), 8, 3)


def test_a_grid_cell_is_launched_as_run_args_says(tmp_path):
    """The grid's whole run: WildStore's arguments, then cloudopt's runner setting the batch
    flag again (as its trials do) must leave one batch setting, the cell's."""
    from types import SimpleNamespace

    from wild import WildStore

    from optimizer.foundation.allocation import Allocation
    from optimizer.trials.training import TrainingModuleManager

    c = corpus()
    config = SimpleNamespace(resources=SimpleNamespace(memory_max=8.0))
    cases = {
        "hydra_style": (Setting(1, 128, ("trainer.max_epochs=2",)),
                        ["data.n_train=2000", "trainer.max_epochs=2", "data.batch_size=128"]),
        "gpt_configurator": (Setting(2, 8), [
            f"{WILD_DIR.resolve()}/config/train_tiny_char.py", "--max_iters=40",
            "--eval_interval=20", "--dataset_chars=20000", "--batch_size=8"]),
        "lightning_cli": (Setting(1, 16, ("--trainer.max_steps", "120")), [
            "fit", "--config", f"{WILD_DIR.resolve()}/conf/lightning_cli.yaml",
            "--trainer.val_check_interval", "30", "--data.n_train", "2000",
            "--trainer.max_steps", "120", "--data.batch_size", "16"]),
    }
    for name, (setting, want) in cases.items():
        s = c[name]
        store = WildStore(s, s.quick_args, config, reps=1, timeout_s=1.0, root=tmp_path)
        args = store.args(setting, tmp_path / name)
        assert args == want, name
        manager = TrainingModuleManager(s.script, args, batch_size_arg=s.batch_flag)
        assert manager.run_args(Allocation(0, setting.cpus, 1.0, setting.batch)) == want, name
    # every run of a script with base_args hashes them: another config is another store
    s = c["gpt_configurator"]
    other = dataclasses.replace(s, base_args=["other.py"])
    assert WildStore(other, [], config, reps=1, timeout_s=1.0, root=tmp_path).dir != \
        WildStore(s, [], config, reps=1, timeout_s=1.0, root=tmp_path).dir


def test_flag_value_reads_templates():
    from wild_score import flag_value

    args = ["cfg.py", "--max_iters=40", "trainer.max_epochs=2", "+data.batch_size=8"]
    assert flag_value(args, "--max_iters={}") == "40"
    assert flag_value(args, "trainer.max_epochs={}") == "2"
    assert flag_value(args, "data.batch_size={}") == "8"
    assert flag_value(args, "--eval_iters={}") is None
    assert flag_value(["--trainer.max_steps", "300"], "--trainer.max_steps") == "300"


def test_read_recommendation_of_a_step_defined_script(tmp_path):
    """The steps a recommendation runs, read from its Kubernetes job like the epochs are,
    and given back in the script's own form."""
    from wild_score import WildScript, read_recommendation

    s = WildScript("g", tmp_path / "g.py", "--batch_size={}", 32, steps_flag="--max_iters={}",
                   default_steps=250, base_args=["cfg.py"])
    rec = {"allocation": {"cpus": 1, "memory_gb": 0.5, "batch_size": 16},
           "runoff_standings": [{"job_time_s": 3.0, "job_cost": 1e-5}]}
    (tmp_path / "recommendation.json").write_text(json.dumps(rec))
    (tmp_path / "k8s-resources.yaml").write_text(
        'args:\n  - "cfg.py"\n  - "--max_iters=500"\n  - "--batch_size=16"\nenv:\n')
    got = read_recommendation(tmp_path, s, ["cfg.py"])
    assert got["setting"] == Setting(1, 16, ("--max_iters=500",))
    (tmp_path / "k8s-resources.yaml").write_text(
        'args:\n  - "cfg.py"\n  - "--max_iters=250"\n  - "--batch_size=16"\nenv:\n')
    assert read_recommendation(tmp_path, s, ["cfg.py"])["setting"] == Setting(1, 16)
    # the quick job's own steps are the job cloudopt was given: no change either
    (tmp_path / "k8s-resources.yaml").write_text('args:\n  - "--max_iters=40"\nenv:\n')
    assert read_recommendation(tmp_path, s, ["cfg.py", "--max_iters=40"])["setting"] == \
        Setting(1, 16)


def test_the_table_says_when_a_loss_is_a_training_loss():
    row = {"script": "char_gpt_steps", "loss_kind": "train", "exit": 0}
    assert "| char_gpt_steps (train loss) | 0 |" in markdown_table([row])
    assert "| sgd (train loss)" not in markdown_table([{"script": "sgd", "exit": 0}])


def test_a_training_loss_is_the_mean_of_the_last_readings():
    from wild_score import train_loss_from_text

    text = "\n".join(f"iter {10 * i}: loss {v}" for i, v in
                     enumerate([3.0, 2.5, 2.0, 1.9, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0], 1))
    # the last five readings, not the last one: one batch's loss is noise
    assert train_loss_from_text(text, r"iter \d+: loss ([0-9.]+)") == 1.6
    assert train_loss_from_text("nothing", r"loss ([0-9.]+)") is None


def test_the_optimum_ranges_over_a_length_the_pick_changed():
    """A pick that runs 600 steps at batch 32 is measured against every batch run 600 steps:
    the grid's own-length cells and the cells at the pick's length alike."""
    longer = cell(1, 32, 6.0, 0.50, extra=("--max_iters=600",))
    grid = [*GRID, longer]
    best = optimum(grid, lambda c: cell_trains_as_well(c, grid, 64), "cost", PRICES)
    assert best.setting == longer.setting
    # its loss is judged against the own batch at the script's own length
    assert target_loss(grid, 64) == target_loss(GRID, 64)

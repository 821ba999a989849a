"""The scoring of the scripts-from-the-wild benchmark (``benchmarks/wild_score.py``, and the
argument and recommendation handling of ``benchmarks/wild.py``): no training runs."""

from __future__ import annotations

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

"""The learning rate with a changed batch (issue 39, --lr-arg): the linear and square-root rules
measured at the recommended setting, one recommended only when it trains measurably faster."""

from __future__ import annotations

import ast
import textwrap
from types import SimpleNamespace

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.search.after_loop.learning_rate import (
    _decide,
    _with_lr,
    lr_args,
    script_lr,
    tune_learning_rate,
)
from optimizer.trials.records import TrialSummary
from optimizer.trials.training import TrainingModuleManager, TrialRequest

SCRIPT = textwrap.dedent("""
    import argparse, os, time
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--steps", type=int, default=400)
    a = p.parse_args()
    bs = int(os.environ.get("OPTIMIZER_BATCH_SIZE", "16"))
    torch.manual_seed(0)
    X = torch.randn(4096, 64); w = torch.randn(64, 1); y = X @ w + 0.1 * torch.randn(4096, 1)
    model = torch.nn.Linear(64, 1)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    for step in range(a.steps):
        i = torch.randint(0, 4096, (bs,))
        opt.zero_grad(); torch.nn.functional.mse_loss(model(X[i]), y[i]).backward(); opt.step()
        time.sleep(0.01)  # a step of a real job: the probe samples the loss 10 times a second
""")


def _runs(base, linear, sqrt):
    def fig(v):
        return {"value": v[0], "low": v[1], "high": v[2]} if v else {"value": None, "why": "-"}
    return {"unscaled": {"lr": 0.01, "loss": fig(base)},
            "linear": {"lr": 0.04, "loss": fig(linear)},
            "square root": {"lr": 0.02, "loss": fig(sqrt)}}


def test_a_rule_wins_only_beyond_the_intervals():
    win = _decide(_runs((3.0, 2.5, 3.5), (1.0, 0.8, 1.2), (2.0, 1.1, 2.9)), "--lr", 0.01, 64, 16)
    assert win["rule"] == "linear" and win["lr"] == 0.04 and "--lr 0.04" in win["note"]
    assert lr_args("--lr", win) == ["--lr", "0.04"]
    tie = _decide(_runs((1.3, 1.0, 1.6), (1.0, 0.8, 1.2), None), "--lr", 0.01, 64, 16)
    assert tie["rule"] is None and tie["lr"] == 0.01 and "keeps --lr 0.01" in tie["note"]
    assert lr_args("--lr", tie) == []
    blind = _decide(_runs(None, (1.0, 0.8, 1.2), None), "--lr", 0.01, 64, 16)
    assert blind["rule"] is None and "could not be compared" in blind["note"]


def test_the_scripts_rate_from_its_arguments_or_its_source():
    tree = ast.parse(SCRIPT)
    given = SimpleNamespace(train_args=["--steps", "9", "--lr=0.3"], module=None)
    assert script_lr(given, "--lr") == (0.3, "--lr in the script's arguments")
    source = SimpleNamespace(train_args=[], module=SimpleNamespace(tree=tree))
    assert script_lr(source, "--lr") == (0.002, "the default of --lr in the script's source")
    assert script_lr(source, "--learning-rate")[0] is None
    twin = _with_lr(TrainingModuleManager("x.py", ["--lr", "0.3", "--steps", "9"]), "--lr", 0.6)
    assert twin.train_args == ["--steps", "9", "--lr", "0.6"]


class _Port:
    def __init__(self, tmp_path):
        self.tmp_path, self.measured = tmp_path, []

    def measure(self, manager, alloc, prefix, run_dir, opts, total):
        self.measured.append((prefix, list(manager.train_args)))
        return manager.run_training(
            TrialRequest(alloc, run_dir / "trials" / f"{prefix}-{alloc.key()}",
                         probe_seconds=None, timeout_s=60, quiet=True),
            ResourceConfig(cpu_count_max=1, memory_max=4.0, gpu_count_max=0))

    def label_batch(self, trial, trial_dir, settable):
        return trial


def test_both_rules_are_measured_at_the_recommended_setting(tmp_path):
    script = tmp_path / "lsq.py"
    script.write_text(SCRIPT)
    # 300 steps: the linear rule's rate has converged by the compared last quarter, the
    # square-root rule's has not (at 1000 both sit on the noise floor: a coin flip).
    manager = TrainingModuleManager(script, ["--steps", "300"])
    manager.load_module()
    opt = _Port(tmp_path)
    final = opt.measure(manager, Allocation(0, 1, 2.0, 64), "final", tmp_path / "run", None,
                        None)
    assert final.ok
    out = tune_learning_rate(opt, manager, final, 16, "--lr", tmp_path / "run", None, None, True)
    assert out["script_lr"] == 0.002
    assert [p for p, _ in opt.measured[1:]] == ["lr-linear", "lr-squareroot"]
    assert opt.measured[1][1][-2:] == ["--lr", "0.008"]  # × 64/16
    assert opt.measured[2][1][-2:] == ["--lr", "0.004"]  # × sqrt(64/16)
    assert set(out["runs"]) == {"unscaled", "linear", "square root"}
    assert all(r["loss"]["value"] is not None for r in out["runs"].values()), out["runs"]
    assert out["rule"] in (None, "linear", "square root") and out["note"]
    assert out["lr"] == (0.002 if out["rule"] is None else out["runs"][out["rule"]]["lr"])
    # a slow rate on a well-conditioned problem: the larger steps reach a lower loss
    assert out["rule"] == "linear", out["runs"]


def test_nothing_is_measured_when_the_batch_is_the_scripts_own(tmp_path):
    final = TrialSummary("f", "completed", Allocation(0, 1, 2.0, 16))
    out = tune_learning_rate(None, None, final, 16, "--lr", tmp_path, None, None, True)
    assert "stays" in out["note"] and "runs" not in out


def test_the_learning_rates_runs_are_launched_as_the_jobs_trials(tmp_path):
    """The twin that runs another rate keeps the launcher decided once for the job (a script
    that needs torchrun ran its learning-rate trials under plain python)."""
    script = tmp_path / "train.py"
    script.write_text("import argparse\np = argparse.ArgumentParser()\n"
                      "p.add_argument('--lr', type=float, default=0.1)\np.parse_args()\n")
    manager = TrainingModuleManager(script, ["--lr", "0.1", "--epochs", "2"], "--bs")
    manager.launcher, manager.launch_required = "torchrun", True
    manager.in_process_probe = False
    twin = _with_lr(manager, "--lr", 0.05)
    assert twin.train_args == ["--epochs", "2", "--lr", "0.05"]  # the later flag wins
    assert (twin.launcher, twin.launch_required, twin.in_process_probe) == ("torchrun", True, False)
    assert twin.batch_size_arg == "--bs" and manager.train_args[1] == "0.1"  # the job's untouched

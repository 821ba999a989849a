"""Settings that reach a script through configs (issue 72): nanoGPT's positional config and
``--key=value`` overrides, Hydra's ``key=value`` overrides, LightningCLI's ``--config`` YAML and
dotted flags, and a key of a YAML/JSON file among the arguments.

Each form has a tiny real script that parses its arguments the way that style does and prints
the batch it used; the test runs a real trial and reads the batch back from that output, and
checks that the default cloudopt reads is the batch the script uses when no trial sets one."""

import json
import textwrap
from pathlib import Path

import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.trials.runner import with_flag
from optimizer.trials.settings.config_args import parse_form, setting_value
from optimizer.trials.training import TrainingModuleManager, TrialRequest

PRICES = ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0)


def importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


# The real parser where an extra installed it, and always the hand-rolled stand-in, which
# parses the same arguments the same way without the dependency.
HYDRA = ["hand-rolled", pytest.param("real", marks=pytest.mark.skipif(
    not importable("hydra"), reason="hydra-core is not installed"))]
LIGHTNING = ["hand-rolled", pytest.param("real", marks=pytest.mark.skipif(
    not importable("jsonargparse"), reason="jsonargparse is not installed"))]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def used_batch(mgr: TrainingModuleManager, tmp_path: Path, batch: int | None, name: str) -> int:
    """Run one real trial at ``batch`` (None: the script's own) and return the batch the
    script printed."""
    mgr.in_process_probe = False  # the batch is read from the script's output, not the probe
    trial = tmp_path / "run" / "trials" / name
    s = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=1.0, batch_size=batch), trial,
                                      timeout_s=60), PRICES)
    out = (trial / "stdout.log").read_text()
    assert s.status == "completed", (s.reason, s.stderr_tail, out)
    lines = [ln for ln in out.splitlines() if ln.startswith("used_batch=")]
    assert len(lines) == 1, out
    return int(lines[0].split()[0].split("=", 1)[1])


# -- 1. nanoGPT: a positional Python config, then --key=value overrides -------------------------

NANOGPT_CONFIGURATOR = """
    import sys
    from ast import literal_eval
    for arg in sys.argv[1:]:
        if '=' not in arg:
            assert not arg.startswith('--')
            exec(open(arg).read())
        else:
            assert arg.startswith('--')
            key, val = arg.split('=')
            key = key[2:]
            if key not in globals():
                raise ValueError(f"Unknown config key: {key}")
            attempt = literal_eval(val)
            assert type(attempt) == type(globals()[key])
            globals()[key] = attempt
"""
NANOGPT_TRAIN = """
    import os
    batch_size = 12
    max_iters = 5000
    exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
    print(f"used_batch={batch_size} max_iters={max_iters}")
"""


@pytest.fixture
def nanogpt(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nanoGPT is run from its folder: config/… is relative to it
    write(tmp_path, "configurator.py", NANOGPT_CONFIGURATOR)
    write(tmp_path, "config/train_x.py", "# a config\nbatch_size = 64\nmax_iters = 20\n")
    return write(tmp_path, "train.py", NANOGPT_TRAIN)


def test_nanogpt_config_then_overrides_run_and_default(nanogpt, tmp_path):
    mgr = TrainingModuleManager(nanogpt, "config/train_x.py --batch_size=32 --max_iters=5",
                                batch_size_arg="--batch_size={}")
    found = mgr.default_batch_setting()
    assert (found.value, found.source) == (32, "--batch_size in the script's arguments")
    assert used_batch(mgr, tmp_path, None, "00-default") == 32
    assert mgr.command(Allocation(batch_size=48))[2:] == [
        "config/train_x.py", "--max_iters=5", "--batch_size=48"]
    assert used_batch(mgr, tmp_path, 48, "01-b48") == 48


def test_nanogpt_default_from_the_config_file_then_the_scripts_global(nanogpt, tmp_path):
    mgr = TrainingModuleManager(nanogpt, "config/train_x.py --max_iters=5",
                                batch_size_arg="--batch_size={}")
    found = mgr.default_batch_setting()
    assert (found.value, found.source, found.file) == (
        64, "batch_size in config/train_x.py", Path("config/train_x.py"))
    assert used_batch(mgr, tmp_path, None, "00-default") == 64
    bare = TrainingModuleManager(nanogpt, "--max_iters=5", batch_size_arg="--batch_size={}")
    assert bare.default_batch_setting().value == 12
    assert bare.default_batch_setting().source == "batch_size = … in the script's source"
    # the epochs/steps knob reads the same way: max_iters from the config file, then overridden
    assert setting_value(["config/train_x.py"], mgr.load_module(), "--max_iters={}").value == 20
    assert setting_value(["config/train_x.py", "--max_iters=7"], mgr.load_module(),
                         "--max_iters={}").number == 7


def test_later_override_wins_over_earlier_and_over_the_config(nanogpt):
    script = TrainingModuleManager(nanogpt).load_module()
    args = ["--batch_size=8", "config/train_x.py", "--batch_size=16", "--batch_size=40"]
    assert setting_value(args, script, "--batch_size={}").number == 40
    # a config file after an override wins over it, as the configurator runs them in order
    assert setting_value(["--batch_size=8", "config/train_x.py"], script,
                         "--batch_size={}").number == 64
    assert with_flag(args, "--batch_size={}", 128) == ["config/train_x.py", "--batch_size=128"]


# -- 2. Hydra: key=value overrides, the default in conf/config.yaml ------------------------------

HYDRA_TRAIN = """
    import os, sys
    try:
        if os.path.basename(__file__) == "hand.py":
            raise ImportError("the hand-rolled stand-in is under test")
        import hydra
    except ImportError:
        import yaml

        class hydra:  # hydra-core's decorator, hand-rolled: config file, then key=value overrides
            @staticmethod
            def main(config_path, config_name, version_base=None):
                def wrap(fn):
                    def run():
                        here = os.path.dirname(os.path.abspath(__file__))
                        with open(os.path.join(here, config_path, config_name + ".yaml")) as fh:
                            cfg = yaml.safe_load(fh)
                        for arg in sys.argv[1:]:
                            plus = len(arg) - len(arg.lstrip("+"))
                            key, value = arg[plus:].split("=", 1)
                            *parents, last = key.split(".")
                            node = cfg
                            for p in parents:
                                node = node.setdefault(p, {}) if plus else node[p]
                            if not plus and last not in node:
                                sys.exit(f"Could not override '{key}': not in the config")
                            node[last] = yaml.safe_load(value)
                        return fn(cfg)
                    return run
                return wrap


    @hydra.main(config_path="conf", config_name="config", version_base=None)
    def main(cfg):
        print(f"used_batch={cfg['data']['batch_size']} steps={cfg['trainer']['max_steps']}")


    if __name__ == "__main__":
        main()
"""


@pytest.fixture(params=HYDRA)
def hydra_script(tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)  # real Hydra writes outputs/ into the working folder
    write(tmp_path, "conf/config.yaml", """
        data:
          batch_size: 16
          root: /tmp/data
        trainer:
          max_steps: 1000
    """)
    return write(tmp_path, "hand.py" if request.param == "hand-rolled" else "train.py",
                 HYDRA_TRAIN)


def test_hydra_overrides_run_and_default(hydra_script, tmp_path):
    mgr = TrainingModuleManager(hydra_script, "data.batch_size=64 trainer.max_steps=5",
                                batch_size_arg="data.batch_size={}")
    assert mgr.default_batch_setting().value == 64
    assert used_batch(mgr, tmp_path, None, "00-default") == 64
    assert mgr.run_args(Allocation(batch_size=24)) == ["trainer.max_steps=5",
                                                       "data.batch_size=24"]
    assert used_batch(mgr, tmp_path, 24, "01-b24") == 24
    from_config = TrainingModuleManager(hydra_script, "trainer.max_steps=5",
                                        batch_size_arg="+data.batch_size={}")
    found = from_config.default_batch_setting()
    assert (found.value, found.source) == (16, f"data.batch_size in {tmp_path}/conf/config.yaml")
    assert used_batch(from_config, tmp_path, None, "02-default") == 16


def test_hydra_override_replaces_plus_forms_and_keeps_the_plus(hydra_script):
    args = ["+data.batch_size=8", "trainer.max_steps=5", "++data.batch_size=9"]
    assert with_flag(args, "data.batch_size={}", 32) == ["trainer.max_steps=5",
                                                         "++data.batch_size=32"]
    assert with_flag(["data.batch_size=8"], "+data.batch_size={}", 32) == ["+data.batch_size=32"]
    assert with_flag(["data.batch_size_max=8"], "data.batch_size", 4) == [
        "data.batch_size_max=8", "data.batch_size=4"]
    script = TrainingModuleManager(hydra_script).load_module()
    assert setting_value(args, script, "data.batch_size={}").number == 9  # the last one wins
    assert setting_value([], script, "trainer.max_steps={}").number == 1000


def test_hydra_defaults_list_group_file_and_group_override(tmp_path):
    write(tmp_path, "conf/train.yaml", "defaults:\n  - data: small\n  - _self_\nlr: 0.1\n")
    write(tmp_path, "conf/data/small.yaml", "batch_size: 8\n")
    write(tmp_path, "conf/data/big.yaml", "batch_size: 256\n")
    path = write(tmp_path, "t.py", """
        import hydra
        @hydra.main(config_path="conf", config_name="train")
        def main(cfg):
            pass
    """)
    script = TrainingModuleManager(path).load_module()
    assert setting_value([], script, "data.batch_size={}").value == 8
    assert setting_value(["data=big"], script, "data.batch_size={}").value == 256
    assert setting_value([], script, "lr={}").number == 0.1


# -- 3. LightningCLI: --config YAML files and dotted flags --------------------------------------

LIGHTNING_REAL = """
    from jsonargparse import ActionConfigFile, ArgumentParser

    p = ArgumentParser()
    p.add_argument("--config", action=ActionConfigFile)
    p.add_argument("--data.batch_size", type=int, default=4)
    p.add_argument("--trainer.max_steps", type=int, default=100)
    cfg = p.parse_args()
    print(f"used_batch={cfg.data.batch_size} steps={cfg.trainer.max_steps}")
"""
LIGHTNING_TRAIN = """
    import sys
    import yaml

    # LightningCLI's parser (jsonargparse), hand-rolled: --config files and --a.b flags, in order
    cfg = {"data": {"batch_size": 4}, "trainer": {"max_steps": 100}}
    argv = sys.argv[1:]
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if not eq:
            value, i = argv[i + 1], i + 1
        if name in ("--config", "-c"):
            with open(value) as fh:
                for section, keys in yaml.safe_load(fh).items():
                    cfg.setdefault(section, {}).update(keys)
        else:
            section, key = name[2:].split(".")
            cfg[section][key] = yaml.safe_load(value)
        i += 1
    print(f"used_batch={cfg['data']['batch_size']} steps={cfg['trainer']['max_steps']}")
"""


@pytest.fixture(params=LIGHTNING)
def lightning(tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "cfg.yaml", "data:\n  batch_size: 32\ntrainer:\n  max_steps: 5\n")
    write(tmp_path, "small.yaml", "data:\n  batch_size: 8\n")
    return write(tmp_path, "train.py",
                 LIGHTNING_TRAIN if request.param == "hand-rolled" else LIGHTNING_REAL)


def test_lightning_dotted_flags_run_and_default(lightning, tmp_path):
    mgr = TrainingModuleManager(lightning, "--config cfg.yaml --data.batch_size 64 "
                                "--trainer.max_steps 5", batch_size_arg="--data.batch_size")
    assert mgr.default_batch_setting().value == 64
    assert used_batch(mgr, tmp_path, None, "00-default") == 64
    assert mgr.run_args(Allocation(batch_size=24)) == [
        "--config", "cfg.yaml", "--trainer.max_steps", "5", "--data.batch_size", "24"]
    assert used_batch(mgr, tmp_path, 24, "01-b24") == 24
    # the = form, given as a template, replaces the space form
    eq = TrainingModuleManager(lightning, "--config=cfg.yaml --data.batch_size 64",
                               batch_size_arg="--data.batch_size={}")
    assert eq.run_args(Allocation(batch_size=12)) == ["--config=cfg.yaml", "--data.batch_size=12"]
    assert used_batch(eq, tmp_path, 12, "02-b12") == 12


def test_lightning_default_from_the_config_files_later_one_wins(lightning, tmp_path):
    mgr = TrainingModuleManager(lightning, "--config cfg.yaml", batch_size_arg="--data.batch_size")
    found = mgr.default_batch_setting()
    assert (found.value, found.source) == (32, "data.batch_size in cfg.yaml")
    assert used_batch(mgr, tmp_path, None, "00-default") == 32
    script = mgr.load_module()
    later = ["--config", "cfg.yaml", "--data.batch_size=64", "--config", "small.yaml"]
    assert setting_value(later, script, "--data.batch_size").value == 8
    assert setting_value(later[:3], script, "--data.batch_size").number == 64
    assert setting_value(later, script, "--trainer.max_steps").value == 5  # small.yaml lacks it


# -- 4. a key of a YAML/JSON file among the arguments -------------------------------------------

FILE_TRAIN = """
    import json, sys
    import yaml

    path = sys.argv[sys.argv.index("--config") + 1]
    with open(path) as fh:
        cfg = json.load(fh) if path.endswith(".json") else yaml.safe_load(fh)
    print(f"used_batch={cfg['train']['batch_size']} lr={cfg['optim']['lr']}")
"""


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_file_key_runs_on_a_copy_and_leaves_the_users_file(tmp_path, monkeypatch, suffix):
    monkeypatch.chdir(tmp_path)
    data = {"train": {"batch_size": 20, "epochs": 2}, "optim": {"lr": 0.01}}
    text = json.dumps(data) if suffix == ".json" else "# mine\ntrain:\n  batch_size: 20\n" \
        "  epochs: 2\noptim:\n  lr: 0.01\n"
    user = write(tmp_path, f"cfg{suffix}", text)
    before = (user.read_bytes(), user.stat().st_mtime_ns)
    script = write(tmp_path, "train.py", FILE_TRAIN)
    mgr = TrainingModuleManager(script, f"--config cfg{suffix} --seed 1",
                                batch_size_arg=f"cfg{suffix}:train.batch_size")
    mgr.config_copies = tmp_path / "run" / "configs"
    found = mgr.default_batch_setting()
    assert (found.value, found.source) == (20, f"train.batch_size in cfg{suffix}")
    assert used_batch(mgr, tmp_path, None, "00-default") == 20
    args = mgr.run_args(Allocation(batch_size=48))
    copy = Path(args[1])
    assert args[0] == "--config" and args[2:] == ["--seed", "1"]
    assert copy.parent == tmp_path / "run" / "configs" and copy.suffix == suffix
    assert mgr.run_args(Allocation(batch_size=48)) == args  # same setting, same copy
    assert used_batch(mgr, tmp_path, 48, "01-b48") == 48
    assert (user.read_bytes(), user.stat().st_mtime_ns) == before
    # a second setting in the same file (the learning rate) is set in the first one's copy
    both = with_flag(args, f"cfg{suffix}:optim.lr", "0.002", mgr.config_copies)
    got = setting_value(both, None, f"cfg{suffix}:train.batch_size")
    assert got.value == 48 and setting_value(both, None, f"cfg{suffix}:optim.lr").value == 0.002
    assert not list(tmp_path.glob(f"cfg-*{suffix}"))  # nothing written beside the user's file


@pytest.mark.parametrize("args, form, words", [
    ("--config other.yaml", "cfg.yaml:train.batch_size", ["cfg.yaml", "not among"]),
    ("--config cfg.yaml", "cfg.yaml:train.bs", ["cfg.yaml", "train.bs"]),
    ("--config gone.yaml", "gone.yaml:train.batch_size", ["gone.yaml", "not found",
                                                          "train.batch_size"]),
])
@pytest.mark.parametrize("writing", [False, True])
def test_file_form_errors_name_the_file_and_key(tmp_path, monkeypatch, args, form, words,
                                                writing):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "cfg.yaml", "train:\n  batch_size: 20\n")
    with pytest.raises(CloudoptError) as err:
        if writing:
            with_flag(args.split(), form, 8, tmp_path / "copies")
        else:
            setting_value(args.split(), None, form)
    message = str(err.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert not (tmp_path / "copies").exists()


def test_missing_config_named_in_the_arguments_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lightning = write(tmp_path, "l.py", LIGHTNING_TRAIN)
    mgr = TrainingModuleManager(lightning, "--config nope.yaml", batch_size_arg="--data.batch_size")
    with pytest.raises(CloudoptError, match=r"^nope\.yaml: config file not found"):
        mgr.default_batch_size()
    write(tmp_path, "configurator.py", NANOGPT_CONFIGURATOR)
    nano = write(tmp_path, "train.py", NANOGPT_TRAIN)
    mgr = TrainingModuleManager(nano, "config/missing.py", batch_size_arg="--batch_size={}")
    with pytest.raises(CloudoptError, match=r"^config/missing\.py: config file not found"):
        mgr.default_batch_size()
    write(tmp_path, "bad.yaml", "data: [unclosed\n")
    with pytest.raises(CloudoptError, match=r"^bad\.yaml: not valid YAML") as err:
        setting_value(["--config", "bad.yaml"], None, "--data.batch_size")
    assert "\n" not in str(err.value)


def test_forms_are_told_apart():
    assert parse_form("--batch_size").kind == "flag"
    assert parse_form("--bs={}").kind == "template"
    assert parse_form("--data.batch_size={}").name == "--data.batch_size"
    assert (parse_form("+data.batch_size={}").kind, parse_form("+data.batch_size={}").name) == (
        "override", "data.batch_size")
    assert parse_form("conf/run.yml:a.b").file == "conf/run.yml"
    assert parse_form("run.json:a.b").key == "a.b"
    with pytest.raises(CloudoptError):
        parse_form(" ")
    # the old forms are unchanged
    assert with_flag(["--workers", "4", "--x"], "--workers", 0) == ["--x", "--workers", "0"]
    assert with_flag(["--nw=4", "--nw", "5"], "--nw={}", 1) == ["--nw=1"]


def test_learning_rate_in_a_config_file_is_read_and_checked_before_any_trial(tmp_path,
                                                                          monkeypatch):
    from optimizer.foundation.config import load_config
    from optimizer.foundation.job import Job
    from optimizer.search.after_loop.learning_rate import script_lr
    from optimizer.search.job_setup import prepare

    monkeypatch.chdir(tmp_path)
    write(tmp_path, "cfg.yaml", "train:\n  batch_size: 20\noptim:\n  lr: 3e-4\n")
    script = write(tmp_path, "train.py", FILE_TRAIN)
    mgr = TrainingModuleManager(script, "--config cfg.yaml")
    mgr.load_module()
    assert script_lr(mgr, "cfg.yaml:optim.lr") == (0.0003, "optim.lr in cfg.yaml")
    job = Job(Path(script), ("--config", "cfg.yaml"), lr_arg="cfg.yaml:optim.lr")
    assert prepare(job, load_config(None))[0].lr_arg is not None
    with pytest.raises(CloudoptError, match=r"^cfg\.yaml: no key optim\.learning_rate \("):
        prepare(Job(Path(script), ("--config", "cfg.yaml"),
                    lr_arg="cfg.yaml:optim.learning_rate"), load_config(None))


def test_the_recommended_learning_rate_reaches_the_job_in_the_flags_form():
    from optimizer.search.after_loop.learning_rate import lr_args

    win = {"rule": "linear", "lr": 0.04}
    assert lr_args("--lr", win) == ["--lr", "0.04"]
    assert lr_args("--lr={}", win) == ["--lr=0.04"]  # was "--lr={} 0.04"
    assert lr_args("optim.lr={}", win) == ["optim.lr=0.04"]
    assert lr_args("cfg.yaml:optim.lr", win) == []

"""The wild corpus (examples/wild/): each script runs standalone and reports a held-out loss.

The manifest, examples/wild/corpus.toml, says for every script which flag sets the batch
size, which sets the length of training (epochs or steps), which arguments every run starts
with (a subcommand, a config file), and how to read the final loss (a regex over stdout, or
a JSON file for the script that prints nothing). The slow tests run each script as a user
would, with the manifest's ``base_args``, ``quick_args`` and its batch flag at its default
(so the flag's form is the script's), in an empty working directory, and check that it
exits 0, leaves that directory empty, and reports a finite loss.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

WILD = Path(__file__).resolve().parents[1] / "examples" / "wild"
CORPUS: dict = tomllib.loads((WILD / "corpus.toml").read_text())
RUN_TIMEOUT_S = 180


LENGTH_KEYS = (("epochs_flag", "default_epochs"), ("steps_flag", "default_steps"))
LOSS_KEYS = ("loss", "train_loss", "loss_file_flag")


def _framework_missing(modules: str) -> str | None:
    """Like pytest.importorskip, without paying for the import (Lightning takes seconds):
    the first of the comma-separated modules that is not installed, or None."""
    for module in (m.strip() for m in modules.split(",") if m.strip()):
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):
            return module
    return None


def base_args(entry: dict) -> list[str]:
    """The arguments every run starts with, ``{here}`` being the manifest's folder."""
    return [a.replace("{here}", str(WILD)) for a in entry.get("base_args", [])]


def flag_args(flag: str, value) -> list[str]:
    """``--bs`` gives ``["--bs", "64"]``; a template ``data.batch_size={}`` one argument."""
    return [flag.replace("{}", str(value))] if "{}" in flag else [flag, str(value)]


def flag_name(flag: str) -> str:
    """The name in a flag or template: ``--batch_size={}`` -> ``--batch_size``."""
    return flag.split("{", 1)[0].rstrip("=")


def declared_default(flag: str, sources: list[str]) -> float | None:
    """The default a flag's setting is declared with: ``add_argument("--bs", default=64)``,
    or by its last dotted name as a Python global or dataclass field (``batch_size = 32``,
    ``batch_size: int = 64``, ``field(default=16, ...)``) or a YAML key (``batch_size: 64``);
    the first source that declares it wins."""
    name = flag_name(flag)
    key = re.escape(name.lstrip("-+").rsplit(".", 1)[-1])
    patterns = (re.escape(name) + r"""['"],.*?default=([0-9.]+)""",
                rf"(?m)^\s*{key}\s*(?::[^=\n]*?)?[=:]\s*(?:field\()?(?:default=)?([0-9][0-9_.]*)")
    for source in sources:
        for pattern in patterns:
            m = re.search(pattern, source)
            if m:
                return float(m.group(1).replace("_", ""))
    return None


def read_loss(entry: dict, stdout: str, out_file: Path | None) -> float:
    """The final loss a script reported: the last regex match (held-out, or the training
    loss where the manifest gives only ``train_loss``), or the JSON key."""
    if "loss_file_flag" in entry:
        assert out_file is not None and out_file.is_file(), "no result file written"
        return float(json.loads(out_file.read_text())[entry["loss_key"]])
    pattern = entry.get("loss") or entry["train_loss"]
    matches = re.findall(pattern, stdout, flags=re.MULTILINE)
    assert matches, f"no match for {pattern!r} in stdout:\n{stdout[-2000:]}"
    return float(matches[-1])


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_manifest_entry_is_complete(name):
    entry = CORPUS[name]
    script = WILD / entry["script"]
    assert script.is_file()
    source = script.read_text()
    for key in ("framework", "batch_flag", "default_batch", "quick_args", "notes"):
        assert key in entry, key
    lengths = [(entry[f], entry[d]) for f, d in LENGTH_KEYS if f in entry or d in entry]
    assert len(lengths) == 1, "give exactly one of epochs_flag/default_epochs, steps_flag/..."
    assert isinstance(entry["default_batch"], int) and entry["default_batch"] > 0
    assert isinstance(lengths[0][1], int) and lengths[0][1] > 0
    for flag in (entry["batch_flag"], lengths[0][0]):
        assert "{" not in flag or flag.count("{}") == 1, flag  # a template has one {}
    # base_args' files exist; the defaults are declared where the manifest says
    for raw, arg in zip(entry.get("base_args", []), base_args(entry), strict=True):
        if raw.startswith("{here}"):
            assert Path(arg).is_file(), arg
    sources = [source]
    if "defaults_in" in entry:
        sources.insert(0, (WILD / entry["defaults_in"]).read_text())
        assert entry["defaults_in"] in str(entry.get("base_args", [])) or \
            Path(entry["defaults_in"]).stem in source, "defaults_in is not the script's config"
    # the flags are really the script's, with the defaults the manifest states
    for flag, default in ((entry["batch_flag"], entry["default_batch"]), lengths[0]):
        found = declared_default(flag, sources)
        assert found is not None, f"{flag} not declared for {entry['script']}"
        assert found == default, (flag, found, default)
    assert all(isinstance(a, str) for a in entry["quick_args"])
    assert sum(k in entry for k in LOSS_KEYS) == 1, f"give one of {LOSS_KEYS}"
    if "loss_file_flag" in entry:
        assert entry["loss_key"]
        assert entry["loss_file_flag"] in source
    else:
        assert re.compile(entry.get("loss") or entry["train_loss"]).groups == 1


def test_read_loss_takes_the_last_match():
    entry = CORPUS["hf_trainer_bert"]
    stdout = ("{'eval_loss': '0.6927', 'epoch': '1'}\n"
              "{'eval_loss': 0.46523284912109375, 'eval_runtime': 0.2266, 'epoch': 2.0}\n")
    assert read_loss(entry, stdout, None) == pytest.approx(0.46523284912109375)
    assert read_loss(CORPUS["word_lm"], "| End of training | test loss  3.88 | test ppl    48.63",
                     None) == pytest.approx(3.88)


def test_the_new_forms_read_their_losses():
    # issue 76's script prints only training-batch losses: the last is its figure
    assert read_loss(CORPUS["char_gpt_steps"], "iter 290: loss 0.9012\niter 300: loss 0.8808\n",
                     None) == pytest.approx(0.8808)
    # nanoGPT-style: the val loss of the last eval line, not the train loss or the iter lines
    out = ("step 200: train loss 1.7519, val loss 1.7643\niter 240: loss 1.7538, time 28.50ms\n"
           "step 250: train loss 1.7339, val loss 1.7310\niter 250: loss 1.7505, time 212.49ms\n")
    assert read_loss(CORPUS["gpt_configurator"], out, None) == pytest.approx(1.7310)
    out = "Test:  Acc@1 85.500 Acc@5 99.900 Loss 0.5785\nTest:  Acc@1 91.550 Acc@5 99.550 Loss 0.2805"
    assert read_loss(CORPUS["torchvision_ref"], out, None) == pytest.approx(0.2805)


def test_framework_missing_names_the_first_absent_module():
    assert _framework_missing("") is None
    assert _framework_missing("json, re") is None
    assert _framework_missing("json,no_such_module_cloudopt_x") == "no_such_module_cloudopt_x"


def test_declared_default_finds_each_form():
    assert declared_default("--bs", ['p.add_argument("--bs", type=int, default=64)']) == 64
    assert declared_default("--trainer.batch_size={}", ["    batch_size: int = 64\n"]) == 64
    assert declared_default("--batch_size={}", ["batch_size = 12\n", "x"]) == 12
    assert declared_default("data.batch_size={}", ["data:\n  batch_size: 128\n"]) == 128
    assert declared_default("--per_device_train_batch_size", [
        "    per_device_train_batch_size: int = field(default=16, metadata={})"]) == 16
    assert declared_default("--data.n_chars", ["    n_chars: int = 200_000\n"]) == 200000
    assert declared_default("--bs", ["batch_size = 12\n"]) is None
    assert flag_args("data.batch_size={}", 64) == ["data.batch_size=64"]
    assert flag_args("--data.batch_size", 64) == ["--data.batch_size", "64"]


@dataclass
class _Ran:
    """One corpus script's quick run: its command's outcome, the files it left in its empty
    working folder, and the result file a silent script wrote."""

    returncode: int
    stdout: str
    stderr: str
    left: list[str]
    out_file: Path | None


def _run_quick(name: str, root: Path) -> _Ran:
    entry = CORPUS[name]
    cwd = root / name / "cwd"
    cwd.mkdir(parents=True)
    # the batch flag at its default: the run fails where the manifest's form is not the script's
    cmd = [sys.executable, str(WILD / entry["script"]), *base_args(entry), *entry["quick_args"],
           *flag_args(entry["batch_flag"], entry["default_batch"])]
    out_file = None
    if "loss_file_flag" in entry:
        out_file = root / name / "result.json"
        cmd += [entry["loss_file_flag"], str(out_file)]
    # One thread each: two scripts share the machine's cores without oversubscribing them.
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = -9, str(exc.stdout or ""), f"timed out after {RUN_TIMEOUT_S} s"
    return _Ran(code, out, err, sorted(p.name for p in cwd.iterdir()), out_file)


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory) -> dict[str, _Ran]:
    """Every corpus script whose framework is installed, run quick, two at a time: each is one
    process on one thread, so two fill this machine's cores and the module takes half as
    long as running them one after another."""
    root = tmp_path_factory.mktemp("wild")
    names = [n for n in sorted(CORPUS) if not _framework_missing(CORPUS[n]["framework"])]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(names, pool.map(lambda n: _run_quick(n, root), names), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_script_runs_standalone(name, quick_runs):
    entry = CORPUS[name]
    missing = _framework_missing(entry["framework"])
    if missing:
        pytest.skip(f"{missing} is not installed")
    ran = quick_runs[name]
    assert ran.returncode == 0, f"exit {ran.returncode}\n{ran.stderr[-3000:]}"
    loss = read_loss(entry, ran.stdout, ran.out_file)
    assert math.isfinite(loss) and loss >= 0
    assert ran.left == [], "the script wrote into its cwd"
    if "loss_file_flag" in entry:
        assert ran.stdout == "" and ran.stderr == "", "the silent script printed something"

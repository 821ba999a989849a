"""The wild corpus (examples/wild/): each script runs standalone and reports a held-out loss.

The manifest, examples/wild/corpus.toml, says for every script which flag sets the batch
size, which sets the length of training, and how to read the final loss (a regex over
stdout, or a JSON file for the script that prints nothing). The slow tests run each script
as a user would, with the manifest's ``quick_args``, in an empty working directory, and
check that it exits 0, leaves that directory empty, and reports a finite loss.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

WILD = Path(__file__).resolve().parents[1] / "examples" / "wild"
CORPUS: dict = tomllib.loads((WILD / "corpus.toml").read_text())
RUN_TIMEOUT_S = 180


def _framework_missing(module: str) -> bool:
    """Like pytest.importorskip, without paying for the import (Lightning takes seconds)."""
    if not module:
        return False
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def read_loss(entry: dict, stdout: str, out_file: Path | None) -> float:
    """The final held-out loss a script reported: the last regex match, or the JSON key."""
    if "loss_file_flag" in entry:
        assert out_file is not None and out_file.is_file(), "no result file written"
        return float(json.loads(out_file.read_text())[entry["loss_key"]])
    matches = re.findall(entry["loss"], stdout)
    assert matches, f"no match for {entry['loss']!r} in stdout:\n{stdout[-2000:]}"
    return float(matches[-1])


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_manifest_entry_is_complete(name):
    entry = CORPUS[name]
    script = WILD / entry["script"]
    assert script.is_file()
    source = script.read_text()
    for key in ("framework", "batch_flag", "default_batch", "epochs_flag", "default_epochs",
                "quick_args", "notes"):
        assert key in entry, key
    assert isinstance(entry["default_batch"], int) and entry["default_batch"] > 0
    assert isinstance(entry["default_epochs"], int) and entry["default_epochs"] > 0
    # the flags are really the script's, with the defaults the manifest states
    for flag, default in ((entry["batch_flag"], entry["default_batch"]),
                          (entry["epochs_flag"], entry["default_epochs"])):
        m = re.search(re.escape(flag) + r"""['"],.*?default=([0-9.]+)""", source)
        assert m, f"{flag} not declared in {entry['script']}"
        assert float(m.group(1)) == default, (flag, m.group(1), default)
    assert all(isinstance(a, str) for a in entry["quick_args"])
    if "loss_file_flag" in entry:
        assert "loss" not in entry and entry["loss_key"]
        assert entry["loss_file_flag"] in source
    else:
        assert re.compile(entry["loss"]).groups == 1


def test_read_loss_takes_the_last_match():
    entry = CORPUS["hf_trainer_bert"]
    stdout = ("{'eval_loss': '0.6927', 'epoch': '1'}\n"
              "{'eval_loss': 0.46523284912109375, 'eval_runtime': 0.2266, 'epoch': 2.0}\n")
    assert read_loss(entry, stdout, None) == pytest.approx(0.46523284912109375)
    assert read_loss(CORPUS["word_lm"], "| End of training | test loss  3.88 | test ppl    48.63",
                     None) == pytest.approx(3.88)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_script_runs_standalone(name, tmp_path):
    entry = CORPUS[name]
    if _framework_missing(entry["framework"]):
        pytest.skip(f"{entry['framework']} is not installed")

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cmd = [sys.executable, str(WILD / entry["script"]), *entry["quick_args"]]
    out_file = None
    if "loss_file_flag" in entry:
        out_file = tmp_path / "result.json"
        cmd += [entry["loss_file_flag"], str(out_file)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")

    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)

    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    loss = read_loss(entry, proc.stdout, out_file)
    assert math.isfinite(loss) and loss >= 0
    assert sorted(p.name for p in cwd.iterdir()) == [], "the script wrote into its cwd"
    if "loss_file_flag" in entry:
        assert proc.stdout == "" and proc.stderr == "", "the silent script printed something"

"""Fingerprints of the main job replayed on recorded grids: same trials in, same answer out.

A refactor of the pipeline must not change what it recommends. This runs the main command
(``python -m optimizer``) on a few scripts with every trial answered from the packed grids of
``benchmarks/data/grids/<machine>/`` (``--executor replay:DIR``, as ``regret_curves.py`` does) and
the agents bounded by episodes (``[run].agent_episodes``), not by seconds: a time budget trains
for as many episodes as the machine's load allows, so two replays of the same job could plan
differently. With both fixed, a job is a function of the code and the seed.

Each case's fingerprint is its ``recommendation.json`` (paths relative to the run folder, the
agents' training seconds dropped: the only figures that measure the machine, not the job), the
trials in the order they were measured (from ``main.log``) with the recorded run each was
answered by, and a digest of both. ``--save FILE`` keeps them; ``--against FILE`` compares and
prints a diff of every case that differs (exit 1); keys a newer ``recommendation.json`` adds are
named, not compared (one that goes is a difference). Usage::

    python benchmarks/replay_fingerprint.py --save runs/fingerprint/before.json
    # ... change the code ...
    python benchmarks/replay_fingerprint.py --against runs/fingerprint/before.json

``benchmarks/data/replay_fingerprints.json`` holds the default cases' fingerprints at cdb476c
(main at 6e6b44d with ``[run].agent_episodes`` added), before issue 74's typed job and result:
``--against benchmarks/data/replay_fingerprints.json`` checks a later tree against it. With
``--episodes 0`` (the agents timed, as before the knob) two replays of the same case differed
there in the agents' episodes (144 and 320, 288 and 3392 on mlp), so only a bounded run repeats.

Cases are ``script:preference:seed`` of the manifest's scripts (``--cases``).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from regret_truth import ROOT, Workload, load_workloads, machine_key

PACK_DIR = ROOT / "benchmarks" / "data" / "grids"
CASES = ("mlp:balanced:0", "charlm:cost:1", "cnn:time:0")
VOLATILE = frozenset({"train_seconds"})
"""Keys whose values measure the machine (the agents' training time), not the job."""


def grid_dir(w: Workload, out: Path) -> Path:
    """The packed grid of ``w`` on this machine, unpacked under ``out/grids`` (once), with its
    ``grid.json`` of the script's own settings."""
    name = f"{w.name}-{w.digest()}"
    packed = PACK_DIR / machine_key() / f"{name}.tar.gz"
    if not packed.is_file():
        raise SystemExit(f"{packed}: no packed grid of {w.name} for this machine "
                         f"({machine_key()}); the fingerprints replay recorded runs only")
    dest = out / "grids" / name
    if not (dest / "cells").is_dir():
        with tarfile.open(packed, "r:gz") as tar:
            tar.extractall(dest, filter="data")
    (dest / "grid.json").write_text(json.dumps({"default_batch": w.default_batch,
                                                "default_workers": w.default_workers}))
    return dest


def run_case(w: Workload, preference: str, seed: int, out: Path,
             args: argparse.Namespace) -> dict[str, Any]:
    """One replayed main job from an empty run folder; its fingerprint."""
    grid = grid_dir(w, out)
    run_dir = out / "runs" / f"{w.name}-{preference}-s{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    cfg = run_dir.with_suffix(".toml")
    cfg.write_text(f"[run]\nseed = {seed}\nagent_episodes = {args.episodes}\n")
    cmd = [sys.executable, "-m", "optimizer", "--train-file", str(w.file),
           "--preference", preference, "--quiet", "--budget", str(args.budget),
           "--executor", f"replay:{grid}", "--live-plan", "off", "--config", str(cfg),
           "--output", str(run_dir), *shlex.split(w.cloudopt_args)]
    if w.args:
        cmd.append(f"--train-args={w.args}")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip() or proc.stdout.strip())[-800:], "seconds": took}
    rec = _normalise(json.loads((run_dir / "recommendation.json").read_text()), run_dir, grid)
    trials = _trial_sequence(run_dir, grid)
    digest = hashlib.sha256(json.dumps([rec, trials], sort_keys=True).encode()).hexdigest()
    return {"digest": digest[:16], "recommendation": rec, "trials": trials, "seconds": took}


def _normalise(value: Any, run_dir: Path, grid: Path) -> Any:
    """``value`` without the machine's figures (:data:`VOLATILE`) and with the run folder's and
    the grid's paths as ``<run>`` and ``<grid>``."""
    if isinstance(value, dict):
        return {k: _normalise(v, run_dir, grid) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_normalise(v, run_dir, grid) for v in value]
    if isinstance(value, str):
        return value.replace(str(run_dir.resolve()), "<run>").replace(str(run_dir), "<run>") \
            .replace(str(grid.resolve()), "<grid>").replace(str(grid), "<grid>")
    return value


def _trial_sequence(run_dir: Path, grid: Path) -> list[str]:
    """The trials in the order the job measured them (``main.log``'s ``measuring`` lines and
    the baseline's folders), each with its status and the recorded run that answered it."""
    said = [m.group(1) for line in (run_dir / "main.log").read_text().splitlines()
            if (m := re.search(r"\d\d:\d\d:\d\d (measuring .*)$", line))]
    trials = []
    for d in sorted((run_dir / "trials").glob("*/summary.json")):
        s = json.loads(d.read_text())
        node = str(s.get("node") or "").replace(str(grid), "<grid>")
        trials.append(f"{d.parent.name} {s.get('status')} {node}")
    return said + trials


def _comparable(fingerprint: dict[str, Any] | None,
                keys: set[str] | None = None) -> dict[str, Any]:
    """The parts of a fingerprint that must not change: the recommendation (only its ``keys``,
    where given) and the trials; not the seconds the run took nor the digest."""
    f = fingerprint or {}
    rec = f.get("recommendation")
    if isinstance(rec, dict) and keys is not None:
        rec = {k: v for k, v in rec.items() if k in keys}
    return {"recommendation": rec, "trials": f.get("trials"), "error": f.get("error")}


def compare(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A unified diff per case whose recommendation or trials differ (empty: all the same),
    and a line per case naming the keys ``after`` adds to its recommendation (a key that goes
    is a difference)."""
    diffs, added = [], []
    for case in sorted(set(before) | set(after)):
        old = (before.get(case) or {}).get("recommendation")
        new = (after.get(case) or {}).get("recommendation")
        keys = set(old) if isinstance(old, dict) else None
        if keys is not None and isinstance(new, dict) and set(new) - keys:
            added.append(f"{case}: keys added to recommendation.json: "
                         f"{', '.join(sorted(set(new) - keys))}")
        a, b = _comparable(before.get(case)), _comparable(after.get(case), keys)
        if a == b and a["error"] is None:
            continue
        lines = difflib.unified_diff(
            json.dumps(a, indent=1, sort_keys=True).splitlines(),
            json.dumps(b, indent=1, sort_keys=True).splitlines(),
            f"{case} (before)", f"{case} (after)", lineterm="", n=2)
        diffs.append("\n".join(lines))
    return diffs, added


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES),
                   help="script:preference:seed, comma-separated (default: %(default)s)")
    p.add_argument("--budget", type=int, default=8, help="real runs of each job (--budget)")
    p.add_argument("--episodes", type=int, default=2000,
                   help="training episodes of each agent ([run].agent_episodes)")
    p.add_argument("--out", default=str(ROOT / "runs" / "fingerprint"), help="work folder")
    p.add_argument("--save", default=None, metavar="FILE", help="write the fingerprints here")
    p.add_argument("--against", default=None, metavar="FILE",
                   help="compare with fingerprints saved earlier; exit 1 on a difference")
    args = p.parse_args(argv)
    workloads = {w.name: w for w in load_workloads(variant="large")}
    out = Path(args.out).resolve()
    prints: dict[str, Any] = {}
    for case in args.cases.split(","):
        name, preference, seed = case.split(":")
        if name not in workloads:
            raise SystemExit(f"--cases {case}: no script {name!r} among {sorted(workloads)}")
        prints[case] = run_case(workloads[name], preference, int(seed), out, args)
        f = prints[case]
        print(f"{case}: {f.get('digest') or 'FAILED: ' + f['error']} ({f['seconds']:.0f} s"
              + (f", {f['recommendation']['allocation']} by {f['recommendation']['agent']}, "
                 f"{len(f['trials'])} lines of trials" if "digest" in f else "") + ")",
              flush=True)
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(prints, indent=1, sort_keys=True))
    if args.against:
        diffs, added = compare(json.loads(Path(args.against).read_text()), prints)
        print("\n".join(added))
        print("\n\n".join(diffs) if diffs else
              f"the same recommendations and trials as {args.against}: {', '.join(prints)}")
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

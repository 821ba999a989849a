"""Statistical efficiency read from probes, against what whole runs show (issue 39).

On every packed grid (``benchmarks/data/grids/<machine>/``, unpacked on first use as by
``regret_curves.py``), at each CPU level and the script's own data-loader workers:

- **truth**: the samples the script's own batch needed to reach the loss every one of its runs
  ended at or below (smoothed as the loss ruler smooths, ``regret_loss``), over the samples each
  other batch needed (medians of their repetitions). A batch that never got there within its
  job has only a bound: below the script's samples over its whole job's;
- **what the probes see**, cut from one repetition of each batch (``--mode``):
  - ``target`` (cloudopt's probes now): the script's own batch runs its whole time box
    (``--probe-seconds``, cloudopt's default 20); another batch stops when its rate is steady
    (``--steady-seconds``, about 8 on this machine's suite) or, later, when its loss watch has
    reached the smoothed loss the own batch ended at (``optimizer.trials.probe.loss_target``),
    within three time boxes;
  - ``steady`` (cloudopt's probes before): every probe stops at ``--steady-seconds``;
  - ``box``: every probe runs its whole time box;
- **samples to a common loss** (cloudopt's estimator, ``optimizer.search.goodput.common_loss``,
  within what batch size alone can do, and capped, as the search caps it, by a probe that
  stopped short of its target) and **slopes over shared samples** (the loss's fall per
  sample over the stretch both runs cover, the ratio cloudopt used before that);
- **the noise scale's form** ``(phi + B0) / (phi + B)`` with ``phi`` from the cut probes'
  gradient norms, **the form unless the curves' interval excludes it** (the efficiency the
  search used before 2026-11-27) and **the curves wherever they have a value, else the form**
  (the one it uses now, ``efficiency_from_trials``).

It prints each row and, per estimator, how often it puts a batch on the right side of the
script's own (better or worse per sample; truths within 5% of 1 left out) and its median
error where the truth is a number. Usage::

    python benchmarks/efficiency_truth.py [--mode target|steady|box] [--scripts cnn,charlm]

Loss per sample does not depend on the machine: ``REGRET_MACHINE=AMD-EPYC-2c-nogpu`` reads the
packed grids on another one.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from regret_curves import unpack
from regret_loss import EMA_SHARE, smooth
from regret_score import Cell
from regret_truth import ROOT, TruthStore, cpu_levels, load_workloads, read_loss_curve

from optimizer.foundation.config import load_config
from optimizer.search.goodput.efficiency import (
    bounded_by_batch,
    common_loss_efficiency,
    estimate_noise_scale,
    progress_over_shared_samples,
)
from optimizer.search.goodput.probe_target import loss_target
from optimizer.trials.probe import read_probe
from optimizer.trials.probe.loss_target import LossTarget, LossWatch

TIE = 0.05  # truths within this of 1 say no side


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scripts", default=None, help="comma-separated (default: every large one)")
    p.add_argument("--probe-seconds", type=float, default=20.0)
    p.add_argument("--rep", type=int, default=0, help="the repetition a probe is cut from")
    p.add_argument("--mode", choices=("target", "steady", "box"), default="target",
                   help="how the probes are cut (see the module docstring)")
    p.add_argument("--steady-seconds", type=float, default=8.0,
                   help="when a probe's rate is steady")
    p.add_argument("--root", default=str(ROOT / "runs" / "regret-large"), help="cache folder")
    return p.parse_args(argv)


def samples_to(curve, level: float, tau: float) -> float:
    """Training samples until the smoothed loss first reaches ``level`` (inf: never)."""
    s = smooth(curve, tau)
    hit = np.flatnonzero((curve.samples - curve.samples[0] >= tau) & (s <= level))
    return float(curve.samples[hit[0]]) if len(hit) else math.inf


def cut(rec, seconds: float):
    """The record as a probe time-boxed to ``seconds`` would have left it."""
    keep = rec.step_points[:, 0] <= seconds if len(rec.step_points) else []
    return replace(rec, losses=[x for x in rec.losses if x[1] <= seconds],
                   step_points=rec.step_points[keep] if len(rec.step_points) else rec.step_points)


def watched(rec, target, steady: float, box: float) -> tuple[float, float | None]:
    """Seconds at which a probe of ``rec`` with ``target`` stops: its rate steady at
    ``steady``, then on until its loss watch is done, at most ``box``; and the bound a probe
    that stopped short of the target puts on its batch's efficiency, as the search applies it
    (``probe_target.training_depth``: the own batch's samples to the target over the samples
    it trained on; None where it got there)."""
    if target is None or not rec.losses or not len(rec.step_points):
        return steady, None
    watch = LossWatch(target)
    p = rec.step_points
    stop = box
    for step, t, value in rec.losses:
        if t > box:
            break
        watch.add(float(np.interp(step - 1, np.r_[0.0, p[:, 1]], np.r_[0.0, p[:, 2]])), value)
        if watch.done:
            stop = min(max(steady, t), box)
            break
    short = watch.reached_at is None and watch.last > 0
    return stop, target.ref_samples / watch.last if short else None


def rows_for(w, store: TruthStore, cpus: int, args: argparse.Namespace) -> list[dict]:
    ref = w.default_batch
    cell = {b: Cell(0, cpus, b, w.default_workers) for b in w.batch_sizes}
    reps = {b: [d for d in (store.cell_dir(c) / f"rep{k}" for k in range(store.repeats))
                if (d / "summary.json").exists()] for b, c in cell.items()}
    curves = {b: [c for c in (read_loss_curve(d, b) for d in ds) if c is not None and len(c)]
              for b, ds in reps.items()}
    if not curves.get(ref):
        return []
    job = float(np.mean([c.samples[-1] for c in curves[ref]]))
    tau = EMA_SHARE * job
    target = float(np.max([smooth(c, tau)[-1] for c in curves[ref]]))  # every run got there
    need_ref = statistics.median(samples_to(c, target, tau) for c in curves[ref])
    records = {b: rec for b, ds in reps.items() if len(ds) > args.rep
             for rec in [read_probe(ds[args.rep] / "probe.jsonl")] if rec is not None}
    if ref not in records:
        return []
    steady = args.probe_seconds if args.mode == "box" else args.steady_seconds
    probes = {ref: cut(records[ref], args.probe_seconds if args.mode != "steady" else steady)}
    aim = loss_target({ref: [probes[ref]]}, ref) if args.mode == "target" else None
    box = LossTarget(0, 1, 1, ref).time_box(args.probe_seconds, math.inf)
    watches = {b: watched(rec, aim, steady, box) if aim else (steady, None)
               for b, rec in records.items() if b != ref}
    stops = {b: t for b, (t, _) in watches.items()}
    probes |= {b: cut(records[b], t) for b, t in stops.items()}
    common = {b: bounded_by_batch(b, ref, m)
              for b, m in common_loss_efficiency(probes, ref).items()}
    for b, (_, cap) in watches.items():  # as planning.measure_efficiency caps it
        if cap is not None and b in common and common[b].value is not None:
            common[b] = replace(common[b], value=min(common[b].value, cap))
    progress = progress_over_shared_samples(probes)
    phi = estimate_noise_scale({b: [r] for b, r in probes.items()}).value
    out = []
    for b in w.batch_sizes:
        if b == ref or not curves.get(b) or b not in probes:
            continue
        need = statistics.median(samples_to(c, target, tau) for c in curves[b])
        whole = float(np.mean([c.samples[-1] for c in curves[b]]))
        slope = (progress[b].value / progress[ref].value
                 if progress[b].value is not None and progress[ref].value else None)
        m = common[b]
        prior = (phi + ref) / (phi + b) if phi else None
        # The rule before 2026-11-27: the form unless the curves' interval excluded it.
        held = prior is not None and (m.value is None or (m.low or 0) <= prior <= (m.high or 0))
        out.append({"script": w.name, "cpus": cpus, "batch": b, "ref": ref,
                    "truth": need_ref / need if math.isfinite(need) else None,
                    "bound": need_ref / whole, "common": common[b].value,
                    "prior": prior, "prior_unless_excluded": prior if held else m.value,
                    "in_use": m.value if m.value is not None else prior,
                    "common_why": common[b].why, "slope": slope,
                    "seen": float(probes[b].losses[-1][1]) if probes[b].losses else 0.0,
                    "probe_s": min(stops[b], float(records[b].step_points[-1, 0])
                                   if len(records[b].step_points) else stops[b])})
    return out


def right_side(row: dict, key: str) -> bool | None:
    est, truth = row[key], row["truth"]
    if est is None:
        return None
    if truth is None:  # never reached within its job: worse than the script's own
        return est < 1.0
    if abs(math.log(truth)) < math.log(1 + TIE):
        return None
    return (est > 1.0) == (truth > 1.0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load_config(None)
    names = set(args.scripts.split(",")) if args.scripts else None
    rows = []
    for w in load_workloads(variant="large"):
        if names and w.name not in names:
            continue
        store = TruthStore(w, config, Path(args.root), repeats=3)
        unpack(store)
        for cpus in cpu_levels(config.resources.cpu_count_max):
            rows += rows_for(w, store, cpus, args)
    if not rows:
        print("no measured grid under", args.root, file=sys.stderr)
        return 1
    print("| script | CPUs | batch (own) | truth | samples to a common loss | slopes over shared "
          "samples |\n|---|---|---|---|---|---|")
    for r in rows:
        truth = f"{r['truth']:.2f}" if r["truth"] is not None else f"< {r['bound']:.2f} (never)"
        common = f"{r['common']:.2f}" if r["common"] is not None else f"- ({r['common_why']})"
        slope = f"{r['slope']:.2f}" if r["slope"] is not None else "-"
        print(f"| {r['script']} | {r['cpus']} | {r['batch']} ({r['ref']}) | {truth} | {common} "
              f"| {slope} |")
    print()
    for key, name in (("common", "samples to a common loss"),
                      ("slope", "slopes over shared samples"),
                      ("prior", "the noise scale's form alone"),
                      ("prior_unless_excluded", "the form unless the curves' interval excludes it"),
                      ("in_use", "the curves wherever they have a value, else the form")):
        sides = [s for s in (right_side(r, key) for r in rows) if s is not None]
        errs = [abs(math.log(r[key] / r["truth"])) for r in rows
                if r[key] and r["truth"] and r[key] > 0]
        print(f"{name}: right side of the script's own batch {sum(sides)}/{len(sides)}; median "
              f"error {math.exp(statistics.median(errs)) - 1:.1%}, 90th percentile "
              f"{math.exp(float(np.quantile(errs, 0.9))) - 1:.1%} over {len(errs)} numeric truths")
    secs = [r["probe_s"] for r in rows]
    print(f"probes of other batches ({args.mode}): median {statistics.median(secs):.1f} s, "
          f"mean {statistics.mean(secs):.1f} s, longest {max(secs):.1f} s over {len(secs)} "
          f"(the script's own: {args.steady_seconds if args.mode == 'steady' else args.probe_seconds:g} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

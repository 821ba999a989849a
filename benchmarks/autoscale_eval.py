"""Autoscaling policies on the shared real traces: the issue-5 evaluation in one run.

Two data sets (``../shared/data``, see its README):

* ``dl-traces``: 60 PyTorch training runs sampled every 0.5 s; features and resources
  ``cpu_cores, mem_gb``; cycle 10 s; 30% of the executions held out (18, as the README's
  reference figures); one split per ``--seeds`` entry.
* AI4DL DLaaS sample (``ai4dl/sample-dlaas.csv``): 4 IBM DLaaS containers sampled every
  10-50 s; the phase model sees AI4DL's eight features (``cpu.usage, cpu.usage.cores,
  cpu.usage.pct, cpu.usage.pct.container.requested, mem.current, mem.limit, mem.usage.pct,
  mem.working.set``); allocations are scored for CPU in cores (``cpu.usage.cores``: a rate,
  unlike ``cpu.usage``, which is CPU-nanoseconds over a sampling interval of varying length)
  and memory in bytes (``mem.current``); cycle 120 s. With only four executions a single
  split would test one; 4-fold cross-validation tests each once with models fitted on the
  other three.

dl-traces is also evaluated leave-one-workload-out (issue 21): one fold per workload, whose
12 executions are tested by policies and a phase model fitted on the other four workloads'
48 only; per ``--seeds`` entry (the phase model's seed), figures per fold and pooled.
``--nested`` checks the defaults of ``phase-adaptive`` by nested leave-one-workload-out
(each outer fold picks among the options by an inner leave-one-workload-out over its four
fitting workloads only).

The baseline of every reduction is ``reactive-rules`` measured in the same run. VPA's
out-of-memory minimum bump-up is its default 100 MiB in each data set's unit.
Prints the policy tables and the wall time (target: < 2 minutes on 2 cores).

    python benchmarks/autoscale_eval.py [--quick] [--seeds 0,1,2] [--nested] [--out DIR]
                                        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MIB_100 = 100 * 2**20
CEILINGS = ("oracle-max", "oracle-rules")
"""Oracles whose plans after the first cycle bound what a practical policy could gain."""


def datasets(data: Path) -> dict[str, dict]:
    """Evaluation settings of each shared data set (keyword arguments of evaluate_file)."""
    return {
        "dl-traces": dict(
            traces=data / "dl-traces" / "traces.csv",
            exec_id="exec_id",
            features=["cpu_cores", "mem_gb"],
            time="time_s",
            cycle_s=10.0,
            test_fraction=0.3,
            policy_params={"vpa": {"oom_min_bump": MIB_100 / 2**30}},
        ),
        "ai4dl-dlaas": dict(
            traces=data / "ai4dl" / "sample-dlaas.csv",
            exec_id="pod.id",
            features=[
                "cpu.usage",
                "cpu.usage.cores",
                "cpu.usage.pct",
                "cpu.usage.pct.container.requested",
                "mem.current",
                "mem.limit",
                "mem.usage.pct",
                "mem.working.set",
            ],
            resources=["cpu.usage.cores", "mem.current"],
            time="timestamp",
            cycle_s=120.0,
            folds=4,
            policy_params={"vpa": {"oom_min_bump": float(MIB_100)}},
        ),
    }


def summary(result) -> dict:
    """Per policy and resource: the figures the issue's target is judged on."""
    keys = (
        "over_allocation_pct",
        "under_provisioned_pct",
        "reduction_vs_reactive_pct",
        "reduction_vs_reactive_matched_pct",
        "reduction_vs_vpa_matched_pct",
    )
    return {
        name: {r: {k: v.get(k) for k in keys} for r, v in m.items()}
        for name, m in result.metrics.items()
    }


def cold_start_ceiling(result) -> dict[str, dict[str, float]]:
    """Reductions vs reactive-rules of policies that start like every practical policy (the
    shared first-cycle rule) and then know the future: exactly (allocation = use), or as
    oracle-max / oracle-rules. The most a practical policy could gain under that rule."""
    from phases.evaluation.evaluate import allocation_metrics

    first = result.plans["reactive-rules"]
    usage = np.concatenate([e.usage for e in result.test])
    reactive = np.array(
        [result.metrics["reactive-rules"][r]["over_allocation_pct"] for r in result.resources]
    )
    out = {}
    for label in ("exact", *CEILINGS):
        parts = []
        for i, e in enumerate(result.test):
            alloc = first[i][e.cycle]
            later = e.cycle >= 1
            after = e.usage if label == "exact" else result.plans[label][i][e.cycle]
            alloc[later] = after[later]
            parts.append(alloc)
        oa = allocation_metrics(usage, np.concatenate(parts))["over_allocation_pct"]
        out[label] = {
            r: float(100 * (1 - oa[i] / reactive[i])) for i, r in enumerate(result.resources)
        }
    return out


def sweep(data: Path, detector_params: dict) -> dict:
    """What else was tried, judged on a validation split of dl-traces' *training* executions.

    The outer split (seed 0, 30% test) is the one the tables report; its training executions
    are split again (seed 1, 30% validation). One factor at a time from the defaults (k=5
    phases, delay 3, relative phase features, cycle 10 s).
    """
    from phases.evaluation.evaluate import evaluate_split, load_executions, split_executions

    kw = datasets(data)["dl-traces"]
    variants = {
        "default": {},
        "k=3": {"detector": {"n_phases": 3}},
        "k=8": {"detector": {"n_phases": 8}},
        "delay=2": {"detector": {"delay": 2}},
        "delay=5": {"detector": {"delay": 5}},
        "raw features": {"phase_features": "raw"},
        "cycle 5 s": {"cycle_s": 5.0},
        "cycle 20 s": {"cycle_s": 20.0},
        "1st-cycle cold start": {"cold_start": "first-cycle"},
    }
    names = ["reactive-rules", "phase-rules", "phase-proactive", "vpa"]
    out = {}
    print(
        "\nsweep on a validation split of dl-traces' training executions "
        "(over-alloc % / under % / reduction vs reactive-rules %, measured | matched)"
    )
    for label, v in variants.items():
        cycle = v.get("cycle_s", kw["cycle_s"])
        ex = load_executions(
            kw["traces"], kw["exec_id"], kw["features"], time=kw["time"], cycle_s=cycle
        )
        train, _ = split_executions(ex, kw["test_fraction"], 0)
        inner, val = split_executions(train, 0.3, 1)
        result = evaluate_split(
            inner,
            val,
            policies=names,
            policy_params=kw["policy_params"],
            phase_features=v.get("phase_features", "relative"),
            window_s=cycle,
            detector_params={**detector_params, **v.get("detector", {})},
            cold_start=v.get("cold_start"),
        )
        out[label] = summary(result)
        for name in names[1:3]:
            cells = []
            for r, m in out[label][name].items():
                cells.append(
                    f"{r} {m['over_allocation_pct']:5.1f}/{m['under_provisioned_pct']:4.1f}"
                    f"/{m['reduction_vs_reactive_pct']:+6.1f}|"
                    f"{m['reduction_vs_reactive_matched_pct']:+6.1f}"
                )
            print(f"  {label:<13} {name:<16} " + "  ".join(cells))
    return out


def cold(args: argparse.Namespace, dataset: str) -> dict:
    """``evaluate_file``'s cold-start keywords for a data set: ``previous-run`` needs the
    workload column, which only dl-traces has (the AI4DL samples keep the pooled rule)."""
    if args.cold_start == "previous-run":
        return {"cold_start": "previous-run", "job": "workload"} if dataset == "dl-traces" else {}
    return {"cold_start": args.cold_start} if args.cold_start else {}


def lowo(
    data: Path, seeds: list[int], detector_params: dict, cold_kw: dict | None = None, **evaluate_kw
) -> dict:
    """dl-traces leave-one-workload-out, per seed: metrics per fold and pooled (summaries).

    ``evaluate_kw`` go to ``evaluate_file`` (e.g. ``policies``, ``policy_params``)."""
    from phases.evaluation.evaluate import evaluate_file
    from phases.evaluation.metrics import score_plans

    kw = {k: v for k, v in datasets(data)["dl-traces"].items() if k != "test_fraction"}
    kw.update(evaluate_kw)
    out: dict = {}
    for seed in seeds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = evaluate_file(
                **kw,
                seed=seed,
                group="workload",
                detector_params=detector_params,
                **(cold_kw or {}),
            )
        groups = result.settings["groups"]
        folds = {}
        for g in sorted(set(groups.values())):
            idx = [i for i, e in enumerate(result.test) if groups[e.exec_id] == g]
            plans = {n: [ps[i] for i in idx] for n, ps in result.plans.items()}
            folds[g] = summary(score_plans(plans, [result.test[i] for i in idx]))
        out[f"seed{seed}"] = {"pooled": summary(result), "folds": folds}
        if {"reactive-rules", *CEILINGS} <= set(result.plans):
            out[f"seed{seed}"]["cold_start_ceiling_pct"] = cold_start_ceiling(result)
    return out


def print_lowo_ceiling(runs: dict) -> dict | None:
    """Mean over seeds of :func:`cold_start_ceiling` on the leave-one-workload-out pool: the
    most any policy that starts with the shared first-cycle rule can gain over reactive-rules."""
    key = "cold_start_ceiling_pct"
    parts = [run[key] for run in runs.values() if key in run]
    if not parts:
        return None
    mean = {
        label: {r: float(np.mean([p[label][r] for p in parts])) for r in parts[0][label]}
        for label in parts[0]
    }
    print(
        "\nLOWO pooled: most any policy can gain over reactive-rules with the shared first-cycle"
        f" rule, knowing the future after it (mean of {len(parts)} seeds):"
    )
    for label, red in mean.items():
        print(f"  then {label:<13}" + ", ".join(f"{r} {c:+.1f}%" for r, c in red.items()))
    return mean


def _mean_table(summaries: list[dict]) -> dict:
    """Mean over summaries of over-allocation and under-provisioning, policy → resource."""
    first = summaries[0]
    return {
        p: {
            r: {
                k: float(np.mean([s[p][r][k] for s in summaries]))
                for k in ("over_allocation_pct", "under_provisioned_pct")
            }
            for r in first[p]
        }
        for p in first
    }


def print_overview(report: dict, seeds: list[int]) -> dict:
    """Per policy, CPU and memory over-allocation / under-provisioning %: mean over the seeded
    splits, mean over the leave-one-workload-out folds (and seeds), and LOWO pooled."""
    seeded = _mean_table([report["datasets"][f"dl-traces/seed{s}"]["summary"] for s in seeds])
    runs = report["lowo"].values()
    per_fold = _mean_table([f for run in runs for f in run["folds"].values()])
    pooled = _mean_table([run["pooled"] for run in runs])
    tables = {"seeded": seeded, "lowo_fold_mean": per_fold, "lowo_pooled": pooled}
    res = list(next(iter(seeded.values())))
    print(
        f"\ndl-traces overview, seeds {seeds}: over-allocation % / under-provisioned % "
        "(seeded splits: mean over seeds; LOWO: mean over 5 folds x seeds | pooled)"
    )
    print(
        f"  {'policy':<20}" + "".join(f"{h:>34}" for h in ("seeded", "LOWO folds", "LOWO pooled"))
    )
    print(f"  {'':<20}" + f"{'  '.join(r[:8] for r in res):>34}" * 3)
    for p in seeded:
        cells = ""
        for t in tables.values():
            pair = "  ".join(
                f"{t[p][r]['over_allocation_pct']:5.1f}/{t[p][r]['under_provisioned_pct']:4.1f}"
                for r in res
            )
            cells += f"{pair:>34}"
        print(f"  {p:<20}{cells}")
    return tables


def quantile_list(text: str) -> list[float]:
    """``--memory-quantiles``: comma-separated numbers in (0, 1]."""
    try:
        qs = [float(q) for q in text.split(",") if q.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    bad = [q for q in qs if not 0.0 < q <= 1.0]
    if not qs or bad:
        raise argparse.ArgumentTypeError(f"quantiles must lie in (0, 1], got {text!r}")
    return qs


def memory_quantile_sweep(
    data: Path,
    seeds: list[int],
    detector_params: dict,
    cold_kw: dict | None,
    quantiles: list[float],
) -> dict:
    """phase-adaptive with each memory quantile beside reactive-rules and vpa: LOWO pooled
    memory over-allocation / under-provisioning, mean over seeds (one operating point each),
    and phase-adaptive's reductions at each peer's under-provisioning matched to its own."""
    kw = datasets(data)["dl-traces"]
    names = ["reactive-rules", "phase-adaptive", "vpa"]
    out: dict = {}
    print(
        "\nmemory quantile of phase-adaptive, LOWO pooled memory over % / under % (mean of seeds):"
    )
    for q in quantiles:
        params = {**kw["policy_params"], "phase-adaptive": {"memory_quantile": q}}
        runs = lowo(data, seeds, detector_params, cold_kw, policies=names, policy_params=params)
        pooled = _mean_table([run["pooled"] for run in runs.values()])
        mem = next(r for r in pooled["phase-adaptive"] if "mem" in r)
        out[f"{q:g}"] = {n: pooled[n][mem] for n in names}
        matched = {
            k: float(np.nanmean([run["pooled"]["phase-adaptive"][mem][k] for run in runs.values()]))
            for k in ("reduction_vs_reactive_matched_pct", "reduction_vs_vpa_matched_pct")
        }
        out[f"{q:g}"]["phase-adaptive"] = {**out[f"{q:g}"]["phase-adaptive"], **matched}
        print(
            f"  q {q:<6g}"
            + "".join(
                f"  {n} {pooled[n][mem]['over_allocation_pct']:5.1f} / "
                f"{pooled[n][mem]['under_provisioned_pct']:4.1f}"
                for n in names
            )
            + "  matched: vs reactive-rules {reduction_vs_reactive_matched_pct:+.1f}%,"
            " vs vpa {reduction_vs_vpa_matched_pct:+.1f}%".format(**matched)
        )
    return out


def nested_selection(data: Path, detector_params: dict, cold_kw: dict | None = None) -> dict:
    """phase-adaptive's options judged by nested leave-one-workload-out (seed 0), per resource.

    For each held-out workload, the four fitting workloads are split leave-one-workload-out
    again; an option's inner score for a resource is the mean over inner folds of its
    reduction of that resource's over-allocation vs reactive-rules at matched
    under-provisioning. Each option applies one level rule to every resource; each resource
    then picks its own best option. Returns the inner scores and the option each outer fold
    would pick per resource; the held-out workload is never seen.
    """
    from phases.evaluation.data import attach_previous_runs, group_folds, read_groups
    from phases.evaluation.evaluate import evaluate_split, load_executions
    from phases.policies import POLICIES, PhaseAdaptivePolicy

    kw = datasets(data)["dl-traces"]
    options = {
        f"{lv}/q{q:g}": {"level": lv, "memory_level": None, "quantile": q}
        for lv in ("last-max", "running-max", "last", "trend", "recent-trend")
        for q in (0.9, 0.95, 0.99)
    }
    ex = load_executions(
        kw["traces"], kw["exec_id"], kw["features"], time=kw["time"], cycle_s=kw["cycle_s"]
    )
    groups = read_groups(kw["traces"], kw["exec_id"], "workload")
    cold_start = (cold_kw or {}).get("cold_start")
    if cold_start == "previous-run":
        attach_previous_runs(ex, groups)
    out: dict = {}
    print(
        "\nnested leave-one-workload-out choice of phase-adaptive options, per resource "
        f"(inner score %, cold start {cold_start or 'pooled'}):"
    )
    for train, test in group_folds(ex, groups):
        held = groups[test[0].exec_id]
        scores: dict[str, dict[str, float]] = {}
        for label, params in options.items():
            POLICIES["_candidate"] = (type("C", (PhaseAdaptivePolicy,), {"name": "_c"}), params)
            inner: dict[str, list[float]] = {}
            for itr, ite in group_folds(train, groups):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = evaluate_split(
                        itr,
                        ite,
                        policies=["reactive-rules", "_candidate"],
                        window_s=kw["cycle_s"],
                        detector_params=detector_params,
                        cold_start=cold_start,
                    )
                for res, m in r.metrics["_c"].items():
                    inner.setdefault(res, []).append(m["reduction_vs_reactive_matched_pct"])
            for res, values in inner.items():
                scores.setdefault(res, {})[label] = float(np.nanmean(values))
        POLICIES.pop("_candidate", None)
        choice = {res: max(sc, key=sc.get) for res, sc in scores.items()}
        out[held] = {"scores": scores, "choice": choice}
        print(f"  held out {held:<20} picks " + ", ".join(f"{r} {c}" for r, c in choice.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--seeds", default="0", help="dl-traces split seeds, comma-separated")
    parser.add_argument("--quick", action="store_true", help="30 CRBM epochs instead of 100")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=None, help="write reports and plots here")
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON")
    parser.add_argument(
        "--cold-start",
        choices=("pooled", "first-cycle", "previous-run"),
        default=None,
        help="first-cycle rule of every practical policy (default: pooled); previous-run: "
        "the peak of the same workload's previous execution (dl-traces only)",
    )
    parser.add_argument(
        "--nested",
        action="store_true",
        help="check phase-adaptive's options by nested leave-one-workload-out",
    )
    parser.add_argument(
        "--memory-quantiles",
        type=quantile_list,
        default=None,
        help="comma-separated memory quantiles of phase-adaptive to compare, leave one "
        "workload out, with reactive-rules and vpa (e.g. 0.9,0.925,0.95)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="also try other k, delay, features, cycle on a validation split",
    )
    args = parser.parse_args(argv)

    import torch

    from phases.evaluation.evaluate import (
        evaluate_file,
        format_table,
        target_verdict,
        write_outputs,
    )

    torch.set_num_threads(args.threads)
    if not args.data.is_dir():
        print(f"shared data not found at {args.data}; nothing to evaluate")
        return 0
    detector_params = {"epochs": 30} if args.quick else {}
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    started, cpu_started = time.perf_counter(), time.process_time()
    report: dict = {"datasets": {}}
    for name, kw in datasets(args.data).items():
        runs = [(name, 0)] if "folds" in kw else [(name, s) for s in seeds]
        for label, seed in runs:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = evaluate_file(
                    **kw, seed=seed, detector_params=detector_params, **cold(args, name)
                )
            wall = time.perf_counter() - t0
            key = label if "folds" in kw else f"{label}/seed{seed}"
            split = (
                f"{kw['folds']}-fold cross-validation"
                if "folds" in kw
                else f"seed {seed}, {len(result.test)} test executions"
            )
            print(f"\n=== {key}: cycle {kw['cycle_s']:g} s, {split}, {wall:.1f} s ===")
            for r in result.resources:
                print(f"\n{r}\n" + format_table(result, r, markdown=False))
            ceiling = cold_start_ceiling(result)
            print(
                "\nmost any policy can gain over reactive-rules with the shared first-cycle"
                " rule, knowing the future after it:"
            )
            for label, red in ceiling.items():
                print(f"  then {label:<13}" + ", ".join(f"{r} {c:+.1f}%" for r, c in red.items()))
            verdict = target_verdict(result)
            print(
                "\ntarget (>=30% less over-allocation than reactive-rules, <=5% under, beats vpa):"
            )
            for policy, readings in verdict.items():
                for how, checks in readings.items():
                    print(
                        f"  {policy} ({how}): "
                        + ", ".join(f"{r} {'met' if ok else 'not met'}" for r, ok in checks.items())
                    )
            report["datasets"][key] = {
                "summary": summary(result),
                "metrics": result.metrics,
                "target": verdict,
                "cold_start_ceiling_pct": ceiling,
                "wall_s": wall,
                "replay_s": result.settings.get("replay_s"),
                "test_ids": result.settings.get("test_ids"),
            }
            if args.out is not None:
                write_outputs(result, args.out / key.replace("/", "-"))
    report["lowo"] = lowo(args.data, seeds, detector_params, cold(args, "dl-traces"))
    report["overview"] = print_overview(report, seeds)
    report["lowo_cold_start_ceiling_pct"] = print_lowo_ceiling(report["lowo"])
    total = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    report["wall_s"] = total
    report["cpu_s"] = cpu
    if args.sweep:
        report["sweep"] = sweep(args.data, detector_params)
    if args.nested:
        report["nested"] = nested_selection(args.data, detector_params, cold(args, "dl-traces"))
    if args.memory_quantiles:
        report["memory_quantiles"] = memory_quantile_sweep(
            args.data, seeds, detector_params, cold(args, "dl-traces"), args.memory_quantiles
        )
    report["cpu_count"] = os.cpu_count()
    report["torch_threads"] = args.threads
    print(
        f"\nwhole evaluation: {total:.1f} s wall ({total / 120:.2f} of the 2-minute target), "
        f"{cpu:.1f} s CPU in this process (the wall time grows when the machine is shared)"
    )
    if len(seeds) > 1:
        _print_seed_spread(report, seeds)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=float))
    return 0


def _print_seed_spread(report: dict, seeds: list[int]) -> None:
    """Mean and range over dl-traces splits of each phase policy's reduction."""
    runs = [report["datasets"][f"dl-traces/seed{s}"]["summary"] for s in seeds]
    print(
        f"\ndl-traces over {len(seeds)} splits: reduction vs reactive-rules %, "
        "measured | at matched under-provisioning (mean [min, max])"
    )
    for policy in runs[0]:
        for r in runs[0][policy]:
            a = np.array([x[policy][r]["reduction_vs_reactive_pct"] for x in runs])
            b = np.array([x[policy][r]["reduction_vs_reactive_matched_pct"] for x in runs])
            print(
                f"  {policy:<20} {r:<10} {a.mean():+7.1f} [{a.min():+.1f}, {a.max():+.1f}]"
                f" | {np.nanmean(b):+7.1f} [{np.nanmin(b):+.1f}, {np.nanmax(b):+.1f}]"
            )


if __name__ == "__main__":
    sys.exit(main())

"""Agreement of detected phases with the stages the training scripts reported (dl-traces).

``../shared/data/dl-traces/traces.csv`` labels every sample with the stage its script was in
(``load``, ``tokenize``, ``train``, ``eval``, ``checkpoint``, ``done``...). The stage is ground
truth for judging, never a model input. For each seed, the 60 executions are split into 42
training and 18 held-out executions (stratified by workload); each method is fitted on the
training executions and labels the held-out samples; normalized mutual information (NMI) and
adjusted Rand index (ARI) against the stages are computed on the held-out samples that have a
full window (the first ``delay`` samples of each execution are left out for every method, so
all methods are scored on the same samples):

- ``crbm``: :class:`phases.PhaseDetector` (CRBM codes + k-means, the AI4DL method);
- ``raw_kmeans``: k-means on the scaled samples, no history;
- ``window_kmeans``: k-means on the flattened scaled windows (``delay + 1`` samples), no CRBM.

All use k = 5 and the features ``cpu_cores, mem_gb``. ``--variants`` repeats the comparison with
the feature preprocessing options of ``PhaseDetector`` (first differences, per-execution
normalisation), applied identically to the baselines. ``--json PATH`` writes ``crbm_nmi``,
``raw_kmeans_nmi``, ``window_kmeans_nmi`` (means over seeds, default features) and the rest.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.model_selection import train_test_split

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from phases import PhaseDetector, read_traces  # noqa: E402
from phases.crbm import stack_windows  # noqa: E402
from phases.traces import FeatureScaler  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "dl-traces" / "traces.csv"
FEATURES = ["cpu_cores", "mem_gb"]
METHODS = ("crbm", "raw_kmeans", "window_kmeans")


def load(path: Path):
    traces = read_traces(path, "exec_id", FEATURES, "time_s", min_length=4)
    frame = pd.read_csv(path)
    stages = [frame["stage"].to_numpy()[rows] for rows in traces.rows]
    workloads = [frame["workload"].to_numpy()[rows[0]] for rows in traces.rows]
    return traces, stages, workloads


def split(n: int, workloads: list[str], seed: int, n_test: int = 18):
    idx = np.arange(n)
    train, test = train_test_split(idx, test_size=n_test, random_state=seed, stratify=workloads)
    return sorted(train), sorted(test)


def baselines(model: PhaseDetector, train, test, delay: int, k: int, seed: int):
    """Raw-sample and raw-window k-means on the same preprocessed, scaled features."""
    prep = [model._prepare(a, np.array([len(a)])) for a in train.arrays]
    prep_test = [model._prepare(a, np.array([len(a)])) for a in test.arrays]
    scaler = FeatureScaler().fit(prep)
    tr, te = scaler.transform(prep), scaler.transform(prep_test)
    # samples with a full history only, as for the CRBM
    tr_samples = np.concatenate([x[delay:] for x in tr])
    te_samples = np.concatenate([x[delay:] for x in te])
    raw = KMeans(k, n_init=10, random_state=seed).fit(tr_samples).predict(te_samples)
    w_tr, w_te = stack_windows(tr, delay), stack_windows(te, delay)
    flat_tr = torch.cat([w_tr.u, w_tr.v], 1).numpy().astype(np.float64)
    flat_te = torch.cat([w_te.u, w_te.v], 1).numpy().astype(np.float64)
    win = KMeans(k, n_init=10, random_state=seed).fit(flat_tr).predict(flat_te)
    return raw, win


def evaluate(
    traces,
    stages,
    workloads,
    seed: int,
    preprocess: str,
    epochs: int | None,
    k: int,
    delay: int = 3,
    lr: float = 1e-3,
):
    train_idx, test_idx = split(len(traces), workloads, seed)
    train, test = traces.subset(train_idx), traces.subset(test_idx)
    params = {
        "n_phases": k,
        "random_state": seed,
        "preprocess": preprocess,
        "device": "cpu",
        "delay": delay,
        "lr": lr,
    }
    if epochs is not None:
        params["epochs"] = epochs
    model = PhaseDetector(**params).fit(train)
    delay = model.delay
    crbm = np.concatenate([s[delay:] for s in model.predict(test)])
    raw, win = baselines(model, train, test, delay, k, seed)
    truth = np.concatenate([stages[i][delay:] for i in test_idx])
    out = {}
    for name, pred in zip(METHODS, (crbm, raw, win), strict=True):
        out[name] = {
            "nmi": float(normalized_mutual_info_score(truth, pred)),
            "ari": float(adjusted_rand_score(truth, pred)),
        }
    out["test_samples"] = int(len(truth))
    out["test_recon_error"] = model.score(test)
    return out


def summarise(runs: list[dict]) -> dict:
    out = {}
    for m in METHODS:
        for metric in ("nmi", "ari"):
            values = np.array([r[m][metric] for r in runs])
            out[f"{m}_{metric}"] = float(values.mean())
            out[f"{m}_{metric}_std"] = float(values.std())
    out["test_recon_error"] = float(np.mean([r["test_recon_error"] for r in runs]))
    return out


def print_table(title: str, summary: dict, runs: list[dict]) -> None:
    print(f"\n{title} ({len(runs)} splits, {runs[0]['test_samples']}+ held-out samples each)")
    print(f"  {'method':<15}{'NMI':>16}{'ARI':>18}")
    for m in METHODS:
        print(
            f"  {m:<15}{summary[m + '_nmi']:>9.3f} ± {summary[m + '_nmi_std']:.3f}"
            f"{summary[m + '_ari']:>11.3f} ± {summary[m + '_ari_std']:.3f}"
        )
    best = max(("raw_kmeans", "window_kmeans"), key=lambda m: summary[m + "_nmi"])
    verdict = "beats" if summary["crbm_nmi"] > summary[best + "_nmi"] else "does NOT beat"
    print(
        f"  CRBM {verdict} the best baseline ({best}) on NMI: "
        f"{summary['crbm_nmi']:.3f} vs {summary[best + '_nmi']:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DATA)
    parser.add_argument("--seeds", type=int, default=5, help="number of seeded splits")
    parser.add_argument("--epochs", type=int, default=None, help="CRBM epochs (default model's)")
    parser.add_argument("--phases", type=int, default=5)
    parser.add_argument("--delay", type=int, default=3, help="history length (all methods)")
    parser.add_argument("--lr", type=float, default=1e-3, help="CRBM learning rate")
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also try preprocess diff, exec-norm, exec-norm+diff",
    )
    parser.add_argument("--quick", action="store_true", help="2 splits, no variants")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.traces.is_file():
        print(f"{args.traces}: not found; the shared data sit beside the repository")
        return 1
    torch.set_num_threads(1)
    if args.quick:
        args.seeds, args.variants = 2, False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces, stages, workloads = load(args.traces)
    print(
        f"{args.traces}: {len(traces)} executions, {traces.n_samples} samples; "
        f"stages {dict(pd.Series(np.concatenate(stages)).value_counts())}"
    )
    result: dict = {
        "seeds": args.seeds,
        "n_phases": args.phases,
        "delay": args.delay,
        "lr": args.lr,
        "epochs": args.epochs,
    }
    variants = ["none"] + (["diff", "exec-norm", "exec-norm+diff"] if args.variants else [])
    for preprocess in variants:
        runs = [
            evaluate(
                traces,
                stages,
                workloads,
                seed,
                preprocess,
                args.epochs,
                args.phases,
                args.delay,
                args.lr,
            )
            for seed in range(args.seeds)
        ]
        summary = summarise(runs)
        print_table(
            f"features: cpu_cores, mem_gb; delay={args.delay}; preprocess={preprocess}",
            summary,
            runs,
        )
        if preprocess == "none":
            result.update(summary)
        else:
            result[f"variant_{preprocess}"] = summary
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

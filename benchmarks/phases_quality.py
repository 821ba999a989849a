"""Agreement of detected phases with the stages the training scripts reported (dl-traces).

``../shared/data/dl-traces/traces.csv`` labels every sample with the stage its script was in
(``load``, ``tokenize``, ``train``, ``eval``, ``checkpoint``, ``done``...). The stage is ground
truth for judging, never a model input. Each method is fitted on training executions and labels
held-out ones; normalized mutual information (NMI) and adjusted Rand index (ARI) against the
stages are computed on the held-out samples that have a full window (the first ``delay``
samples of each execution are left out for every method, so all are scored on the same
samples). Splits:

- ``--split stratified`` (default): per seed, 42 training and 18 held-out executions,
  stratified by workload;
- ``--split workload``: leave one workload out (fit on four workloads, score on the fifth; one
  split per workload, so ``--seeds`` only seeds the models): jobs the model has never seen.

Methods, all with k = ``--phases`` clusters on the same engineered, preprocessed and scaled
features (``--features``, one table per specification; see :mod:`phases.features`):

- ``crbm``: :class:`phases.PhaseDetector` (CRBM codes + k-means, the AI4DL method); rows
  ``crbm+viterbi``, ``crbm+forward`` and ``crbm+min4`` are the same fitted model with
  ``smoothing="viterbi"``, ``smoothing="forward"`` (``stay_prob`` from ``--stay``) and
  ``min_duration=4``;
- baselines: ``raw_kmeans`` (k-means on the samples, no history), ``window_kmeans`` (k-means
  on the flattened windows of ``delay + 1`` samples, no CRBM), ``gmm`` (scikit-learn's
  ``GaussianMixture``, full covariances, on the samples);
- ``crbm+window`` (``+viterbi``, ``+forward``): the detector fitted with ``window_weight``
  (``--window-weight``, default 2): k-means on each code beside its scaled input window;
- ``raw_kmeans+viterbi`` and ``window_kmeans+viterbi``: the baselines with the detector's
  smoother, reference rows showing what smoothing alone adds (not counted as plain baselines).

``--json PATH`` writes every figure: per feature specification and method, the mean and standard
deviation over splits of NMI and ARI, plus ``crbm_nmi``, ``raw_kmeans_nmi``, ``window_kmeans_nmi``
and ``gmm_nmi`` for the default features (``abs``) without smoothing.
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
from sklearn.mixture import GaussianMixture
from sklearn.model_selection import train_test_split

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from phases import PhaseDetector, read_traces  # noqa: E402
from phases.crbm import stack_windows  # noqa: E402
from phases.smoothing import smooth_phases  # noqa: E402
from phases.traces import FeatureScaler  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "dl-traces" / "traces.csv"
FEATURES = ["cpu_cores", "mem_gb"]
DETECTORS = {
    "crbm": {"smoothing": "none", "min_duration": 1},
    "crbm+viterbi": {"smoothing": "viterbi", "min_duration": 1},
    "crbm+forward": {"smoothing": "forward", "min_duration": 1},
    "crbm+min4": {"smoothing": "none", "min_duration": 4},
}
# The same detector clustering its codes beside the window (window_weight, fitted again).
WINDOWED = {
    "crbm+window": {"smoothing": "none", "min_duration": 1},
    "crbm+window+viterbi": {"smoothing": "viterbi", "min_duration": 1},
    "crbm+window+forward": {"smoothing": "forward", "min_duration": 1},
}
BASELINES = ("raw_kmeans", "window_kmeans", "gmm")
REFERENCE = ("raw_kmeans+viterbi", "window_kmeans+viterbi")
METHODS = (*DETECTORS, *WINDOWED, *BASELINES, *REFERENCE)
FEATURE_SPECS = ("abs", "whole", "whole+whole-rate", "whole+whole-diff", "rel", "rel+rel-rate")


def load(path: Path):
    traces = read_traces(path, "exec_id", FEATURES, "time_s", min_length=4)
    frame = pd.read_csv(path)
    stages = [frame["stage"].to_numpy()[rows] for rows in traces.rows]
    workloads = [frame["workload"].to_numpy()[rows[0]] for rows in traces.rows]
    return traces, stages, workloads


def splits(workloads: list[str], kind: str, n_seeds: int, n_test: int = 18):
    """``(seed, train indices, test indices)`` of every split."""
    idx = np.arange(len(workloads))
    if kind == "workload":
        names = sorted(set(workloads))
        w = np.asarray(workloads)
        for seed, name in enumerate(names):
            yield seed, idx[w != name].tolist(), idx[w == name].tolist()
        return
    for seed in range(n_seeds):
        train, test = train_test_split(idx, test_size=n_test, random_state=seed, stratify=workloads)
        yield seed, sorted(train), sorted(test)


def baselines(model: PhaseDetector, train, test, delay: int, k: int, seed: int) -> dict:
    """Plain clusterings of the detector's own inputs (engineered, preprocessed, scaled)."""
    prep = [model._prepare(a, np.array([len(a)])) for a in train.arrays]
    prep_test = [model._prepare(a, np.array([len(a)])) for a in test.arrays]
    scaler = FeatureScaler().fit(prep)
    tr, te = scaler.transform(prep), scaler.transform(prep_test)
    # samples with a full history only, as for the CRBM
    tr_samples = np.concatenate([x[delay:] for x in tr])
    raw = KMeans(k, n_init=10, random_state=seed).fit(tr_samples)
    out = {"raw_kmeans": np.concatenate([raw.predict(x[delay:]) for x in te])}
    variance = raw.inertia_ / tr_samples.size
    out["raw_kmeans+viterbi"] = np.concatenate(
        [smooth_phases(raw.transform(x[delay:]) ** 2, variance) for x in te]
    )
    gmm = GaussianMixture(k, n_init=2, random_state=seed).fit(tr_samples)
    out["gmm"] = np.concatenate([gmm.predict(x[delay:]) for x in te])
    w_tr, w_te = stack_windows(tr, delay), stack_windows(te, delay)
    flat_tr = torch.cat([w_tr.u, w_tr.v], 1).numpy().astype(np.float64)
    flat_te = torch.cat([w_te.u, w_te.v], 1).numpy().astype(np.float64)
    win = KMeans(k, n_init=10, random_state=seed).fit(flat_tr)
    out["window_kmeans"] = win.predict(flat_te)
    # per execution, as the detector smooths: split the held-out windows back by execution
    counts = [max(len(x) - delay, 0) for x in te]
    parts = np.split(flat_te, np.cumsum(counts)[:-1])
    out["window_kmeans+viterbi"] = np.concatenate(
        [smooth_phases(win.transform(p) ** 2, win.inertia_ / flat_tr.size) for p in parts]
    )
    return out


def evaluate(traces, stages, train_idx, test_idx, seed: int, spec: str, args) -> dict:
    train, test = traces.subset(train_idx), traces.subset(test_idx)
    params = {
        "n_phases": args.phases,
        "random_state": seed,
        "preprocess": args.preprocess,
        "features": spec,
        "stay_prob": args.stay,
        "device": "cpu",
        "delay": args.delay,
        "lr": args.lr,
        "n_hidden": args.hidden,
    }
    if args.epochs is not None:
        params["epochs"] = args.epochs
    model = PhaseDetector(**params).fit(train)
    delay = model.delay
    preds = {}
    for name, options in DETECTORS.items():
        model.set_params(**options)
        preds[name] = np.concatenate([s[delay:] for s in model.predict(test)])
    if args.window_weight > 0:
        model.set_params(window_weight=args.window_weight, **DETECTORS["crbm"]).fit(train)
        for name, options in WINDOWED.items():
            model.set_params(**options)
            preds[name] = np.concatenate([s[delay:] for s in model.predict(test)])
    preds.update(baselines(model, train, test, delay, args.phases, seed))
    truth = np.concatenate([stages[i][delay:] for i in test_idx])
    out = {
        name: {
            "nmi": float(normalized_mutual_info_score(truth, preds[name])),
            "ari": float(adjusted_rand_score(truth, preds[name])),
        }
        for name in METHODS
        if name in preds
    }
    out["test_samples"] = int(len(truth))
    return out


def methods_of(runs: list[dict]) -> list[str]:
    return [m for m in METHODS if m in runs[0]]


def summarise(runs: list[dict]) -> dict:
    out: dict = {"splits": len(runs)}
    for m in methods_of(runs):
        for metric in ("nmi", "ari"):
            values = np.array([r[m][metric] for r in runs])
            out[f"{m}_{metric}"] = float(values.mean())
            out[f"{m}_{metric}_std"] = float(values.std())
        out[f"{m}_nmi_per_split"] = [round(r[m]["nmi"], 4) for r in runs]
    return out


def print_table(title: str, summary: dict, runs: list[dict]) -> None:
    samples = min(r["test_samples"] for r in runs)
    print(f"\n{title} ({len(runs)} splits, {samples}+ held-out samples each)", flush=True)
    print(f"  {'method':<22}{'NMI':>16}{'ARI':>18}")
    for m in methods_of(runs):
        print(
            f"  {m:<22}{summary[m + '_nmi']:>9.3f} ± {summary[m + '_nmi_std']:.3f}"
            f"{summary[m + '_ari']:>11.3f} ± {summary[m + '_ari_std']:.3f}"
        )


def verdict(tables: dict[str, dict]) -> dict:
    """The best detector configuration against the best plain baseline of the features compared."""
    det = [
        (s[f"{m}_nmi"], spec, m)
        for spec, s in tables.items()
        for m in (*DETECTORS, *WINDOWED)
        if f"{m}_nmi" in s
    ]
    base = [(s[f"{m}_nmi"], spec, m) for spec, s in tables.items() for m in BASELINES]
    d, b = max(det), max(base)
    beats = d[0] > b[0]
    print(
        f"\nOver the features compared: best detector {d[2]} on features={d[1]}: NMI "
        f"{d[0]:.3f}; best plain baseline {b[2]} on features={b[1]}: NMI {b[0]:.3f}. The detector "
        f"{'beats' if beats else 'does NOT beat'} every baseline; goal NMI >= 0.10 "
        f"{'met' if beats and d[0] >= 0.10 else 'NOT met'}."
    )
    return {
        "best_detector": {"features": d[1], "method": d[2], "nmi": d[0]},
        "best_baseline": {"features": b[1], "method": b[2], "nmi": b[0]},
        "detector_beats_every_baseline": bool(beats),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DATA)
    parser.add_argument("--seeds", type=int, default=5, help="number of seeded splits")
    parser.add_argument("--split", choices=("stratified", "workload"), default="stratified")
    parser.add_argument(
        "--features",
        nargs="+",
        default=list(FEATURE_SPECS),
        help="feature specifications to compare (PhaseDetector's features)",
    )
    parser.add_argument("--preprocess", default="none", help="PhaseDetector's preprocess")
    parser.add_argument("--epochs", type=int, default=None, help="CRBM epochs (default model's)")
    parser.add_argument("--phases", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=10, help="CRBM hidden units")
    parser.add_argument("--delay", type=int, default=3, help="history length (all methods)")
    parser.add_argument("--lr", type=float, default=1e-3, help="CRBM learning rate")
    parser.add_argument("--stay", type=float, default=0.99, help="smoother's stay_prob")
    parser.add_argument("--window-weight", type=float, default=2.0,
                        help="window_weight of the crbm+window rows (0: leave them out)")
    parser.add_argument("--quick", action="store_true", help="2 splits, features abs and whole")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.traces.is_file():
        print(f"{args.traces}: not found; the shared data sit beside the repository")
        return 1
    torch.set_num_threads(1)
    if args.quick:
        args.seeds, args.features = 2, ["abs", "whole"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces, stages, workloads = load(args.traces)
    print(
        f"{args.traces}: {len(traces)} executions, {traces.n_samples} samples; "
        f"stages {dict(pd.Series(np.concatenate(stages)).value_counts())}"
    )
    result: dict = {k: v for k, v in vars(args).items() if k not in ("traces", "json", "quick")}
    tables: dict[str, dict] = {}
    for spec in args.features:
        runs = [
            evaluate(traces, stages, tr, te, seed, spec, args)
            for seed, tr, te in splits(workloads, args.split, args.seeds)
        ]
        tables[spec] = summarise(runs)
        title = f"features={spec}; preprocess={args.preprocess}; delay={args.delay}"
        print_table(f"{title}; split={args.split}", tables[spec], runs)
    result["tables"] = tables
    result.update(verdict(tables))
    if "abs" in tables:
        result.update({f"{m}_nmi": tables["abs"][f"{m}_nmi"] for m in ("crbm", *BASELINES)})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speed of the CRBM phase detector against a straightforward per-window NumPy CRBM.

On the shared real traces (``../shared/data/dl-traces/traces.csv``, features ``cpu_cores,
mem_gb``) this measures, in one run:

- CRBM training time per epoch: :class:`phases.crbm.CRBM` (minibatch tensors) versus
  :class:`NumpyWindowCRBM` below, the same CD-1 algorithm written the obvious way (one window
  at a time, gradients accumulated over the minibatch in a Python loop), same windows, same
  batch size, same learning rate and momentum;
- inference throughput in windows/s: ``PhaseDetector.predict`` (windows cut, encoded and
  assigned to phases) on the executions repeated until there are >= 1M windows, versus the
  per-window NumPy loop (encode + nearest centroid) on a slice;
- reconstruction error (scaled units) of both after the same epochs, and of the torch model
  after ``DEFAULT_EPOCHS``.

Targets (issue 4): fit >= 10x faster than the NumPy loop, predict >= 1M windows/s on CPU.
``--curve`` also prints the reconstruction error against epochs (how ``DEFAULT_EPOCHS`` was
chosen). Both sides use one thread unless ``--threads`` says otherwise.

``--device`` (default ``auto``: CUDA where present) puts the torch side on a GPU; the NumPy
baseline stays on the CPU, so on a GPU machine the ratios are GPU torch against CPU NumPy, and
a second run with ``--device cpu`` gives the CPU torch figures beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from phases import PhaseDetector, read_traces  # noqa: E402
from phases.crbm import CRBM, resolve_device, stack_windows  # noqa: E402
from phases.detector import DEFAULT_EPOCHS  # noqa: E402
from phases.traces import FeatureScaler  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "dl-traces" / "traces.csv"


class NumpyWindowCRBM:
    """The baseline: the CRBM of :mod:`phases.crbm`, one window at a time in NumPy."""

    def __init__(self, crbm: CRBM) -> None:
        # start from the same initial weights as the torch model
        self.p = {
            k: v.detach().cpu().numpy().astype(np.float64).copy()
            for k, v in crbm.state_dict().items()
        }

    @staticmethod
    def _sigmoid(x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-x))

    def hidden(self, v: np.ndarray, u: np.ndarray) -> np.ndarray:
        p = self.p
        return self._sigmoid(p["b"] + u @ p["B"] + v @ p["W"])

    def train_epoch(self, v, u, batch_size, lr, momentum, rng, velocity) -> float:
        p = self.p
        order = rng.permutation(len(v))
        total = 0.0
        for lo in range(0, len(v), batch_size):
            idx = order[lo : lo + batch_size]
            grads = {k: np.zeros_like(val) for k, val in p.items()}
            for i in idx:  # the per-window loop this benchmark measures
                v0, u0 = v[i], u[i]
                a_hat = p["a"] + u0 @ p["A"]
                b_hat = p["b"] + u0 @ p["B"]
                h0 = self._sigmoid(b_hat + v0 @ p["W"])
                total += float(((v0 - (a_hat + p["W"] @ h0)) ** 2).mean())
                hs = (rng.random(h0.shape) < h0).astype(np.float64)
                v1 = a_hat + p["W"] @ hs
                h1 = self._sigmoid(b_hat + v1 @ p["W"])
                grads["W"] += np.outer(v0, h0) - np.outer(v1, h1)
                grads["A"] += np.outer(u0, v0 - v1)
                grads["B"] += np.outer(u0, h0 - h1)
                grads["a"] += v0 - v1
                grads["b"] += h0 - h1
            for k in p:
                velocity[k] = momentum * velocity[k] + grads[k] / len(idx)
                p[k] = p[k] + lr * velocity[k]
        return total / len(v)

    def predict(self, v: np.ndarray, u: np.ndarray, centers: np.ndarray) -> np.ndarray:
        out = np.empty(len(v), dtype=np.int64)
        for i in range(len(v)):
            h = self.hidden(v[i], u[i])
            out[i] = int(np.argmin(((centers - h) ** 2).sum(1)))
        return out

    def recon_error(self, v: np.ndarray, u: np.ndarray) -> float:
        p = self.p
        a_hat, b_hat = p["a"] + u @ p["A"], p["b"] + u @ p["B"]
        h = self._sigmoid(b_hat + v @ p["W"])
        return float(((v - (a_hat + h @ p["W"].T)) ** 2).mean())


def _windows(traces, delay=3):
    scaler = FeatureScaler(traces.features).fit(traces.arrays)
    return stack_windows(scaler.transform(traces.arrays), delay)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":  # kernels are asynchronous: time what ran, not what was queued
        torch.cuda.synchronize(device)


def bench_fit(traces, epochs: int, batch_size: int, lr: float, momentum: float, seed: int,
              device: torch.device | None = None):
    device = device or torch.device("cpu")
    win = _windows(traces)
    torch_model = CRBM(win.v.shape[1], 10, 3, random_state=seed)
    baseline = NumpyWindowCRBM(torch_model)  # the same initial weights, on the CPU
    torch_model = torch_model.to(device)
    wv, wu = win.v.to(device), win.u.to(device)
    _sync(device)
    t0 = time.perf_counter()
    torch_curve = torch_model.fit_windows(
        wv,
        wu,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        momentum=momentum,
        random_state=seed,
    )
    _sync(device)
    torch_s = (time.perf_counter() - t0) / epochs
    v, u = win.v.numpy().astype(np.float64), win.u.numpy().astype(np.float64)
    rng = np.random.default_rng(seed)
    velocity = {k: np.zeros_like(x) for k, x in baseline.p.items()}
    t0 = time.perf_counter()
    for _ in range(epochs):
        baseline.train_epoch(v, u, batch_size, lr, momentum, rng, velocity)
    numpy_s = (time.perf_counter() - t0) / epochs
    torch_err = float(torch_model.reconstruction_errors(wv, wu).mean())
    return {
        "windows": int(len(v)),
        "epochs_compared": epochs,
        "torch_s_per_epoch": torch_s,
        "numpy_s_per_epoch": numpy_s,
        "fit_speedup": numpy_s / torch_s,
        "torch_fit_windows_per_s": len(v) / torch_s,
        "numpy_fit_windows_per_s": len(v) / numpy_s,
        "torch_recon_error": torch_err,
        "numpy_recon_error": baseline.recon_error(v, u),
        "torch_curve_last": torch_curve[-1],
    }, baseline


def bench_predict(traces, model: PhaseDetector, baseline: NumpyWindowCRBM, target: int):
    n_win = sum(max(len(a) - model.delay, 0) for a in traces.arrays)
    reps = max(1, -(-target // n_win))
    big = list(traces.arrays) * reps
    model.predict(big[: len(traces.arrays)])  # warm-up of allocator/kernels
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        model.predict(big)  # returns NumPy labels: the device has finished
        times.append(time.perf_counter() - t0)
    total = n_win * reps
    win = model._windows(model._as_batch(traces))  # the scaled windows the model sees
    v, u = win.v.cpu().numpy().astype(np.float64), win.u.cpu().numpy().astype(np.float64)
    t0 = time.perf_counter()
    labels_np = baseline.predict(v, u, model.cluster_centers_)
    numpy_s = time.perf_counter() - t0
    # sanity: the baseline with the model's own weights agrees with the model
    check = NumpyWindowCRBM(model.crbm_)
    agree = float(
        np.mean(
            check.predict(v, u, model.cluster_centers_)
            == np.concatenate([s[model.delay :] for s in model.predict(traces)])
        )
    )
    del labels_np
    return {
        "predict_windows": int(total),
        "predict_s": min(times),
        "predict_windows_per_s": total / min(times),
        "numpy_predict_windows_per_s": len(v) / numpy_s,
        "predict_speedup": (total / min(times)) / (len(v) / numpy_s),
        "numpy_agrees_with_model": agree,
    }


def error_curve(traces, checkpoints, seed: int, device: str = "cpu") -> dict[int, float]:
    model = PhaseDetector(epochs=max(checkpoints), random_state=seed, device=device).fit(traces)
    return {e: model.loss_curve_[e - 1] for e in checkpoints}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DATA)
    parser.add_argument("--epochs", type=int, default=5, help="epochs timed on both sides")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--predict-windows", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--curve", action="store_true", help="also print error vs epochs")
    parser.add_argument("--quick", action="store_true", help="2 epochs, 200k predict windows")
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="where the torch side runs (auto: CUDA where present)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: CUDA is not available on this machine", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    if not args.traces.is_file():
        print(f"{args.traces}: not found; the shared data sit beside the repository")
        return 1
    if args.quick:
        args.epochs, args.predict_windows = 2, 200_000
    torch.set_num_threads(args.threads)
    traces = read_traces(args.traces, "exec_id", ["cpu_cores", "mem_gb"], "time_s", min_length=4)
    print(
        f"{args.traces}: {len(traces)} executions, {traces.n_samples} samples; "
        f"torch {torch.__version__}, {args.threads} thread(s), torch on {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    )

    fit, baseline = bench_fit(traces, args.epochs, args.batch_size, 1e-3, 0.9, args.seed,
                              device)
    print(f"fit, {fit['windows']} windows, batch {args.batch_size}, {args.epochs} epochs each:")
    print(
        f"  torch CRBM      {1e3 * fit['torch_s_per_epoch']:8.1f} ms/epoch "
        f"({fit['torch_fit_windows_per_s']:,.0f} windows/s)  recon error "
        f"{fit['torch_recon_error']:.4f}"
    )
    print(
        f"  numpy per-window{1e3 * fit['numpy_s_per_epoch']:8.1f} ms/epoch "
        f"({fit['numpy_fit_windows_per_s']:,.0f} windows/s)  recon error "
        f"{fit['numpy_recon_error']:.4f}"
    )
    print(f"  speed-up {fit['fit_speedup']:.1f}x (target >= 10x)")

    t0 = time.perf_counter()
    model = PhaseDetector(random_state=args.seed, device=str(device)).fit(traces)
    full_fit_s = time.perf_counter() - t0
    print(
        f"PhaseDetector.fit ({DEFAULT_EPOCHS} epochs + k-means): {full_fit_s:.2f} s, "
        f"reconstruction error {model.score(traces):.4f}"
    )
    pred = bench_predict(traces, model, baseline, args.predict_windows)
    print(
        f"predict: {pred['predict_windows']:,} windows in {pred['predict_s']:.3f} s = "
        f"{pred['predict_windows_per_s']:,.0f} windows/s (target >= 1,000,000); numpy "
        f"per-window {pred['numpy_predict_windows_per_s']:,.0f} windows/s; speed-up "
        f"{pred['predict_speedup']:.0f}x; numpy loop with the model's weights agrees on "
        f"{100 * pred['numpy_agrees_with_model']:.2f}% of windows"
    )
    result = {
        **fit,
        **pred,
        "full_fit_s": full_fit_s,
        "default_epochs": DEFAULT_EPOCHS,
        "default_recon_error": model.score(traces),
        "threads": args.threads,
        "device": str(device),
    }
    if args.curve:
        checkpoints = [1, 10, 30, 50, 100, 200, 300, 400, 600, 1000]
        curve = error_curve(traces, checkpoints, args.seed, str(device))
        print(
            "reconstruction error by epoch: "
            + ", ".join(f"{e}: {err:.4f}" for e, err in curve.items())
        )
        result["error_curve"] = curve
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

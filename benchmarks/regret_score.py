"""The arithmetic of the recommendation-regret benchmark: no runs, no I/O but the plot.

A *cell* is one allocation of the measured grid (GPUs, CPU threads, batch size, data-loader
workers). The ground truth of a cell is its repeated full runs: wall seconds and peak memory of
each. A *pick* is what a method recommends: a cell plus the memory it would request. Under the
ground truth a pick has

- job time: the cell's median wall time;
- job cost: that time at the hourly price of its GPUs, CPUs and *requested* memory (a request
  below the cell's measured peak is an out-of-memory failure: infinite regret);
- a balanced score: the project's own (``optimizer.search.baseline.rank_trials``): each objective
  (cost, time, resource share) over its best value in the grid, weighted by the ``balanced``
  preference vector.

regret = objective(pick) / best objective of the grid - 1; search cost = seconds of trials run
/ seconds of one full run at the default allocation; memory slack = 1 - peak / request. The grid's
own cells are sized at their measured peak, so the optimum carries no slack.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PREFERENCES = ("cost", "time", "balanced")
MEMORY_MARGIN = 0.15
"""Memory a search peer requests over the peak it observed (what Kubernetes' VPA adds)."""
MEMORY_ROUND_GB = 0.25


@dataclass(frozen=True, order=True)
class Cell:
    gpus: int
    cpus: int
    batch: int
    workers: int | None = None

    def key(self) -> str:
        w = "" if self.workers is None else f"-w{self.workers}"
        return f"g{self.gpus}-c{self.cpus}-b{self.batch}{w}"

    def as_dict(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "cpus": self.cpus, "batch_size": self.batch,
                "workers": self.workers}


@dataclass
class CellTruth:
    """Repeated full runs of one cell."""

    cell: Cell
    wall_s: list[float]
    peak_gb: list[float]
    on_grid: bool = True

    @property
    def time_s(self) -> float:
        return float(statistics.median(self.wall_s))

    @property
    def peak(self) -> float:
        return float(statistics.median(self.peak_gb))


@dataclass
class Prices:
    gpu_hour: float
    cpu_hour: float
    gb_hour: float
    gpu_max: int
    cpu_max: int
    memory_max: float
    balanced: tuple[float, float, float] = (0.34, 0.33, 0.33)
    """(cost, time, resource) weights of the ``balanced`` preference."""

    def hourly(self, cell: Cell, memory_gb: float) -> float:
        return cell.gpus * self.gpu_hour + cell.cpus * self.cpu_hour + memory_gb * self.gb_hour

    def resource_share(self, cell: Cell, memory_gb: float) -> float:
        """Mean share of the machine held, as ``rank_trials`` computes it."""
        parts = [cell.cpus / self.cpu_max, memory_gb / self.memory_max]
        if self.gpu_max:
            parts.insert(0, cell.gpus / self.gpu_max)
        return sum(parts) / len(parts)


@dataclass
class Pick:
    """A method's recommendation: a cell, the memory requested and what finding it cost."""

    method: str
    cell: Cell | None
    memory_gb: float | None
    trials: int = 0
    search_s: float = 0.0
    budget: int | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def right_size(peak_gb: float, margin: float = MEMORY_MARGIN, step: float = MEMORY_ROUND_GB) -> float:
    """Peak plus ``margin``, rounded up to ``step`` GB."""
    return math.ceil(peak_gb * (1 + margin) / step - 1e-9) * step


Point = tuple[Cell, float | None]
"""What a search peer runs: a cell and the memory it requests (None: it right-sizes the request
from the peak it observes)."""


class GroundTruth:
    """The measured cells of one script on one machine, and objectives under them.

    ``memory_levels`` (GB) make the memory request a dimension of the peers' search space: each
    cell at each level is one point, a level under the run's peak an out-of-memory failure. The
    optimum stays each cell at its own peak, the request no level grid can beat.
    """

    def __init__(self, cells: Iterable[CellTruth], prices: Prices, default: Cell,
                 memory_levels: Sequence[float] = (), default_memory_gb: float | None = None):
        self.cells = {c.cell: c for c in cells}
        self.prices = prices
        self.default = default
        self.default_memory_gb = default_memory_gb
        """The default allocation's request: what a user runs when a search found nothing."""
        self.memory_levels = tuple(sorted(float(m) for m in memory_levels))
        grid = [c for c in self.cells.values() if c.on_grid]
        if not grid:
            raise ValueError("ground truth holds no grid cell")
        self._raw = {c.cell: self._raw_objectives(c.cell, c.peak) for c in grid}
        self.best_raw = tuple(min(v[i] for v in self._raw.values()) for i in range(3))

    def _raw_objectives(self, cell: Cell, memory_gb: float,
                        time_s: float | None = None) -> tuple[float, float, float]:
        t = self.cells[cell].time_s if time_s is None else time_s
        return (t * self.prices.hourly(cell, memory_gb) / 3600.0, t,
                self.prices.resource_share(cell, memory_gb))

    def objective(self, cell: Cell, memory_gb: float | None, preference: str, *,
                  time_s: float | None = None, peak_gb: float | None = None) -> float:
        """Job $ (cost), job s (time) or the balanced score; inf when memory < peak.

        ``time_s``/``peak_gb`` replace the cell's medians (one repetition as a search saw it).
        """
        peak = self.cells[cell].peak if peak_gb is None else peak_gb
        memory = peak if memory_gb is None else memory_gb
        if memory < peak:
            return math.inf
        cost, t, share = self._raw_objectives(cell, memory, time_s)
        if preference == "cost":
            return cost
        if preference == "time":
            return t
        if preference == "balanced":
            w, b = self.prices.balanced, self.best_raw
            return w[0] * cost / b[0] + w[1] * t / b[1] + w[2] * share / b[2]
        raise ValueError(f"unknown preference {preference!r}")

    def optimum(self, preference: str) -> tuple[Cell, float]:
        """The grid's best cell (sized at its peak) and its objective."""
        cell = min((c for c in self.cells.values() if c.on_grid),
                   key=lambda c: self.objective(c.cell, c.peak, preference)).cell
        return cell, self.objective(cell, self.cells[cell].peak, preference)

    def regret(self, cell: Cell, memory_gb: float | None, preference: str) -> float:
        return self.objective(cell, memory_gb, preference) / self.optimum(preference)[1] - 1.0

    def memory_slack(self, cell: Cell, memory_gb: float | None) -> float | None:
        if memory_gb is None or memory_gb <= 0:
            return None
        return 1.0 - self.cells[cell].peak / memory_gb

    def points(self) -> list[Point]:
        """The peers' search space: every grid cell, at every memory level if there are some."""
        cells = sorted(c.cell for c in self.cells.values() if c.on_grid)
        levels: Sequence[float | None] = self.memory_levels or (None,)
        return [(c, m) for c in cells for m in levels]

    def search_cost(self, seconds: float) -> float:
        """Seconds of trials over the seconds of one full run of the default allocation."""
        return seconds / self.cells[self.default].time_s

    def observed(self, cell: Cell, rep: int, preference: str,
                 memory_gb: float | None = None) -> tuple[float, float, float]:
        """What a search that ran ``cell`` once (repetition ``rep``) at ``memory_gb`` saw: its
        objective (inf: killed for memory), the run's seconds and its peak GB. Without
        ``memory_gb`` the run had room and the request is right-sized from its peak. A killed
        run is counted at its whole length: when in the run the peak came is not recorded."""
        truth = self.cells[cell]
        wall, peak = truth.wall_s[rep % len(truth.wall_s)], truth.peak_gb[rep % len(truth.peak_gb)]
        memory = right_size(peak) if memory_gb is None else memory_gb
        value = self.objective(cell, memory, preference, time_s=wall, peak_gb=peak)
        return value, wall, peak


def evaluate(truth: GroundTruth, pick: Pick, preference: str, script: str) -> dict[str, Any]:
    """One JSON row: the pick under the ground truth beside the grid's optimum."""
    best_cell, best_value = truth.optimum(preference)
    row: dict[str, Any] = {
        "script": script, "preference": preference, "method": pick.method,
        "budget": pick.budget, "trials": pick.trials, "note": pick.note,
        "optimum": {**best_cell.as_dict(), "memory_gb": round(truth.cells[best_cell].peak, 3),
                    "objective": best_value},
        **pick.extra,
    }
    if pick.cell is None:
        row.update(recommended=None, regret=None, search_cost=truth.search_cost(pick.search_s),
                   memory_slack=None, failed=pick.note or "no recommendation")
        return row
    value = truth.objective(pick.cell, pick.memory_gb, preference)
    failed = None if math.isfinite(value) else (
        f"out of memory: requests {pick.memory_gb:g} GB, peak {truth.cells[pick.cell].peak:.2f} GB")
    row.update(
        recommended={**pick.cell.as_dict(), "memory_gb": pick.memory_gb,
                     "objective": value if math.isfinite(value) else None,
                     "on_grid": truth.cells[pick.cell].on_grid},
        regret=value / best_value - 1.0 if math.isfinite(value) else None,
        search_cost=truth.search_cost(pick.search_s),
        memory_slack=truth.memory_slack(pick.cell, pick.memory_gb),
        failed=failed)
    return row


def random_search(truth: GroundTruth, n: int, preference: str, rng: np.random.Generator,
                  cells: Sequence[Cell] | None = None) -> Pick:
    """``n`` distinct points of the search space in random order, each run once; the best
    observed wins."""
    pool: list[Point] = [(c, None) for c in cells] if cells else truth.points()
    chosen = [pool[i] for i in rng.permutation(len(pool))[:n]]
    return best_observed(truth, chosen, preference, rng, f"random@{n}")


def best_observed(truth: GroundTruth, points: Sequence[Point], preference: str,
                  rng: np.random.Generator, method: str) -> Pick:
    """Run each point once (a random repetition); recommend the best seen: at the memory it
    ran with, or right-sized from its peak where the search does not choose memory; the
    default allocation where every run was killed for memory."""
    seen = []
    for cell, memory in points:
        value, wall, peak = truth.observed(cell, int(rng.integers(1 << 30)), preference, memory)
        seen.append((value, wall, peak, cell, memory))
    value, _, peak, cell, memory = min(seen, key=lambda s: s[0])
    search_s = sum(s[1] for s in seen)
    if not math.isfinite(value):
        return nothing_found(truth, method, len(points), search_s)
    return Pick(method, cell, right_size(peak) if memory is None else memory,
                trials=len(points), search_s=search_s)


def nothing_found(truth: GroundTruth, method: str, trials: int, search_s: float) -> Pick:
    """A search whose every run was killed for memory leaves the user with the default."""
    return Pick(method, truth.default, truth.default_memory_gb, trials=trials, search_s=search_s,
                note="every run was killed for memory: the default allocation stays")


def mean_of_picks(truth: GroundTruth, make: Callable[[int], Pick], preference: str,
                  seeds: int, script: str) -> dict[str, Any]:
    """Run a randomised peer with ``seeds`` seeds; the row holds mean regret, search cost and
    slack, and the spread (median and worst seed) in ``seeds``."""
    rows = [evaluate(truth, make(s), preference, script) for s in range(seeds)]
    regrets = [r["regret"] if r["regret"] is not None else math.inf for r in rows]
    row = dict(rows[0])
    row["recommended"] = None  # differs by seed
    row["regret"] = _finite(float(np.mean(regrets)))
    row["search_cost"] = float(np.mean([r["search_cost"] for r in rows]))
    slacks = [r["memory_slack"] for r in rows if r["memory_slack"] is not None]
    row["memory_slack"] = float(np.mean(slacks)) if slacks else None
    row["seeds"] = {"n": seeds, "median_regret": _finite(float(np.median(regrets))),
                    "worst_regret": _finite(float(np.max(regrets))),
                    "found_optimum": float(np.mean([r == 0 for r in regrets]))}
    return row


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method: rows, median and worst regret (failures count as infinite), median search
    cost and median memory slack."""
    out = []
    for method in sorted({r["method"] for r in rows}, key=_method_order):
        mine = [r for r in rows if r["method"] == method]
        regrets = [math.inf if r["regret"] is None else r["regret"] for r in mine]
        slacks = [r["memory_slack"] for r in mine if r["memory_slack"] is not None]
        out.append({
            "method": method, "rows": len(mine),
            "median_regret": _finite(float(np.median(regrets))),
            "worst_regret": _finite(float(np.max(regrets))),
            "failed": sum(r.get("failed") is not None for r in mine),
            "median_search_cost": float(np.median([r["search_cost"] for r in mine])),
            "median_memory_slack": float(np.median(slacks)) if slacks else None,
            "median_trials": float(np.median([r["trials"] for r in mine])),
        })
    return out


def _method_order(method: str) -> tuple[int, int, str]:
    name, _, n = method.partition("@")
    rank = {"default": 0, "cloudopt": 1, "best-probe": 2, "random": 3, "optuna-tpe": 4,
            "optuna-gp": 5}.get(name, 9)
    return (int(n) if n.isdigit() else -1, rank, method)


def format_summary(summary: Sequence[dict[str, Any]], ruler: str = "samples") -> str:
    """The per-method table under the samples/s ruler, the loss ruler (``regret_loss``: the
    ``*_regret_loss`` and ``never_reached`` entries) or both."""
    head = ["method", "rows", "trials"]
    if ruler in ("samples", "both"):
        head += ["median regret", "worst regret"]
    if ruler in ("loss", "both"):
        head += ["median regret (loss)", "worst regret (loss)", "never reached"]
    head += ["failed", "search cost", "memory slack"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary:
        cells = [s["method"], str(s["rows"]), f"{s['median_trials']:g}"]
        if ruler in ("samples", "both"):
            cells += [pct(s["median_regret"]), pct(s["worst_regret"])]
        if ruler in ("loss", "both"):
            never = s.get("never_reached")
            cells += [pct(s.get("median_regret_loss")), pct(s.get("worst_regret_loss")),
                      "-" if never is None else f"{round(never, 2):g}"]
        cells += [str(s["failed"]), f"{s['median_search_cost']:.2f}x",
                  pct(s["median_memory_slack"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_rows(rows: Sequence[dict[str, Any]], key: str = "regret") -> str:
    """Regret of every method, one line per script x preference (``key``: ``regret`` under the
    samples/s ruler, ``regret_loss`` under the loss ruler)."""
    methods = sorted({r["method"] for r in rows}, key=_method_order)
    keys = sorted({(r["script"], r["preference"]) for r in rows})
    lines = ["| script | preference | " + " | ".join(methods) + " |",
             "|---|---|" + "---|" * len(methods)]
    for script, pref in keys:
        cells = []
        for m in methods:
            r = next((r for r in rows if (r["script"], r["preference"], r["method"])
                      == (script, pref, m)), None)
            cells.append("-" if r is None else ("fail" if r.get(key) is None and r.get("failed")
                                                  else pct(r.get(key))))
        lines.append(f"| {script} | {pref} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pct(x: float | None) -> str:
    return "inf" if x is None else f"{100 * x:.1f}%"


def plot(summary: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], path: Any) -> None:
    """Median regret against median search cost, one point per method (worst as a bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    colors = {"default": "grey", "cloudopt": "C3", "best-probe": "C1", "random": "C0",
              "optuna-tpe": "C2", "optuna-gp": "C4"}
    markers = {"2": "v", "3": "v", "4": "o", "5": "o", "8": "^", "9": "^"}
    for s in summary:
        if s["median_regret"] is None:
            continue
        name, _, n = s["method"].partition("@")
        worst = s["worst_regret"] if s["worst_regret"] is not None else s["median_regret"]
        ax.errorbar(s["median_search_cost"], 100 * s["median_regret"] + 0.1,
                    yerr=[[0], [100 * (worst - s["median_regret"])]], fmt=markers.get(n, "s"),
                    color=colors.get(name, "k"), capsize=3, alpha=0.85, label=s["method"])
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    ax.set_xlabel("search cost (trial seconds / one full default run)")
    ax.set_ylabel("regret + 0.1, % (median; bar to worst; log)")
    ax.set_title(f"Recommendation regret over {len({(r['script'], r['preference']) for r in rows})}"
                 " script x preference cases")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

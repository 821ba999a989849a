"""The arithmetic of the scripts-from-the-wild benchmark (``wild.py``): no runs, no I/O but
reading a manifest, a loss file and a recommendation.

A *cell* is one setting of a script run whole: CPUs, batch size and the arguments that change
its length (a recommended epoch or step count; none for the grid). Its command line is
:func:`run_args`: the manifest's ``base_args`` (a subcommand, a config file), the run's own
arguments, the length flag, then the batch flag, in the script's own form (``--bs 64``,
``--batch_size=64``, ``data.batch_size=64``). Its truth is its repeated whole
runs: wall seconds, peak memory and the final held-out loss each printed (or wrote).

The target loss ``L0`` of a cell is the final loss of the script's own batch on as many CPUs
(where that cell is missing, the mean over CPU counts, which the table shows as ``l0``). A
cell *trains as well* when its loss is at most its ``L0`` plus ``LOSS_TOLERANCE`` of it. The
thread count changes a script's floating-point sums: accelerate_loop's own batch ends at
0.0145 on 1 CPU and 0.0141 on 2, every run alike, 2.8% apart where the tolerance is 1%.
Against the mean, the script's own batch on 1 CPU failed to train as well as itself; against
its own batch on the same CPUs a batch is judged by what the batch changes.
The optimum of a preference is the cheapest (``cost``) or fastest (``time``) such cell of the
grid; regret = the recommendation's measured objective / the optimum's - 1; claim error =
what cloudopt claimed / what the whole job measured - 1.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from optimizer.foundation.config import read_toml  # noqa: E402

LOSS_TOLERANCE = 0.01
"""A cell trains as well as the script's own batch when its loss is within 1% of L0."""
PREFERENCES = ("cost", "time")


@dataclass
class WildScript:
    """One script of the corpus, as ``examples/wild/corpus.toml`` describes it."""

    name: str
    script: Path
    batch_flag: str
    """``--bs`` (``--bs 64``) or a template whose ``{}`` is the value, one argument
    (``--batch_size={}``, ``data.batch_size={}``): the forms of ``--batch-size-arg``."""
    default_batch: int
    framework: str = ""
    """Modules that must be importable to run it, comma-separated ("" for plain torch)."""
    epochs_flag: str | None = None
    default_epochs: float | None = None
    steps_flag: str | None = None
    """For a step-defined job, the flag (or template) of its step count, instead of epochs."""
    default_steps: float | None = None
    base_args: list[str] = field(default_factory=list)
    """Arguments every run starts with (a subcommand, a config file), ``{here}`` resolved."""
    defaults_in: Path | None = None
    """The file declaring the batch and length defaults, where it is not the script."""
    loss: str | None = None
    """Regex whose one group is the final loss in the script's output: held-out, or for a
    script that prints none (``loss_kind`` "train") the last training-batch loss."""
    loss_kind: str = "held-out"
    """"held-out", or "train" where the manifest gives ``train_loss``: noisier, and not
    comparable with a held-out loss."""
    loss_file_flag: str | None = None
    """For a silent script: the flag naming the JSON file it writes its loss to ..."""
    loss_key: str | None = None
    """... and the key (dotted for nested tables) of the loss in that file."""
    quick_args: list[str] = field(default_factory=list)
    notes: str = ""

    @property
    def length_flag(self) -> str | None:
        """The flag that sets the job's length: the steps flag, else the epochs flag."""
        return self.steps_flag or self.epochs_flag

    @property
    def default_length(self) -> float | None:
        return self.default_steps if self.steps_flag else self.default_epochs

    @property
    def length_unit(self) -> str | None:
        """"steps" or "epochs" (None: the manifest names no length flag)."""
        return "steps" if self.steps_flag else ("epochs" if self.epochs_flag else None)

    def modules(self) -> list[str]:
        """The modules that must be importable to run the script."""
        return [m.strip() for m in self.framework.split(",") if m.strip()]


def load_corpus(path: Path, root: Path) -> list[WildScript]:
    """The manifest's scripts, in its order; ``script`` paths are relative to ``root`` or to
    the manifest's own folder; ``{here}`` in ``base_args`` is the manifest's folder."""
    data = read_toml(path)
    here = str(Path(path).resolve().parent)
    out = []
    for name, spec in data.items():
        if not isinstance(spec, dict) or "script" not in spec:
            continue
        script = Path(spec["script"])
        if not script.is_absolute():
            script = root / script if (root / script).exists() else path.parent / script
        epochs, steps = spec.get("default_epochs"), spec.get("default_steps")
        framework = spec.get("framework", "")
        if isinstance(framework, list):
            framework = ",".join(framework)
        defaults_in = spec.get("defaults_in")
        out.append(WildScript(
            name=name, script=script, batch_flag=str(spec["batch_flag"]),
            default_batch=int(spec["default_batch"]), framework=str(framework),
            epochs_flag=spec.get("epochs_flag") or None,
            default_epochs=float(epochs) if epochs is not None else None,
            steps_flag=spec.get("steps_flag") or None,
            default_steps=float(steps) if steps is not None else None,
            base_args=[str(a).replace("{here}", here) for a in spec.get("base_args", [])],
            defaults_in=path.parent / defaults_in if defaults_in else None,
            loss=spec.get("loss") or spec.get("train_loss") or None,
            loss_kind="train" if spec.get("train_loss") and not spec.get("loss") else "held-out",
            loss_file_flag=spec.get("loss_file_flag") or None,
            loss_key=spec.get("loss_key") or None,
            quick_args=[str(a) for a in spec.get("quick_args", [])],
            notes=spec.get("notes", "")))
    return out


# ------------------------------------------------------------------------------ the loss
def loss_from_text(text: str, pattern: str) -> float | None:
    """The last match of ``pattern``'s first group in ``text`` (the final loss), or None."""
    matches = re.findall(pattern, text, flags=re.MULTILINE)
    if not matches:
        return None
    last = matches[-1]
    return _loss(last[0] if isinstance(last, tuple) else last)


TRAIN_TAIL, TRAIN_MIN = 0.1, 5
"""A training loss is the mean of the readings printed over the run's last tenth (at least
five): one batch's loss is noise (batch 4 swings by 10%), as cloudopt's own judge knows."""


def train_loss_from_text(text: str, pattern: str) -> float | None:
    """The mean of the last :data:`TRAIN_TAIL` of ``pattern``'s matches (at least
    :data:`TRAIN_MIN`), or None: a script's final training loss, smoothed."""
    values = [_loss(m[0] if isinstance(m, tuple) else m)
              for m in re.findall(pattern, text, flags=re.MULTILINE)]
    values = [v for v in values if v is not None]
    if not values:
        return None
    tail = values[-max(TRAIN_MIN, math.ceil(TRAIN_TAIL * len(values))):]
    return float(statistics.mean(tail))


def loss_from_json(path: Path, key: str) -> float | None:
    """The value at ``key`` (``a.b`` for nested tables) of a JSON file, or None."""
    try:
        value: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return _loss(value)


def _loss(value: Any) -> float | None:
    """A loss as a number; a diverged run's NaN as inf (it trains as badly as can be)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return math.inf if math.isnan(x) else x


def _finite(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


# ------------------------------------------------------------------------------ cells
@dataclass(frozen=True)
class Setting:
    """What a whole run was given: CPUs, batch size and extra arguments (epochs)."""

    cpus: int
    batch: int
    extra: tuple[str, ...] = ()

    def key(self) -> str:
        """A folder name: ``c2-b64``, then ``_`` and each extra argument (``_--epochs_3``)."""
        tail = "".join(f"_{re.sub(r'[^A-Za-z0-9.=-]+', '', a)}" for a in self.extra)
        return f"c{self.cpus}-b{self.batch}{tail}"

    def label(self) -> str:
        """``2×64`` (``, --epochs 3`` where the length changes), as the table shows it."""
        tail = f", {' '.join(self.extra)}" if self.extra else ""
        return f"{self.cpus}×{self.batch}{tail}"


@dataclass
class CellRuns:
    """Repeated whole runs of one setting (a failed run is absent)."""

    setting: Setting
    wall_s: list[float]
    peak_gb: list[float]
    losses: list[float | None]
    cores: list[float] = field(default_factory=list)
    """Mean cores each run used: well under the CPUs it was given, the machine was busy."""

    @property
    def time_s(self) -> float:
        return float(statistics.median(self.wall_s))

    @property
    def peak(self) -> float:
        return float(statistics.median(self.peak_gb))

    @property
    def loss(self) -> float | None:
        known = [x for x in self.losses if x is not None]
        return float(statistics.median(known)) if known else None


@dataclass(frozen=True)
class Prices:
    """Dollars per CPU-hour and per GB-hour of memory (the configuration's)."""

    cpu_hour: float
    gb_hour: float

    def cost(self, cpus: int, memory_gb: float, time_s: float) -> float:
        return (cpus * self.cpu_hour + memory_gb * self.gb_hour) * time_s / 3600.0


def objective(cell: CellRuns, preference: str, prices: Prices,
              memory_gb: float | None = None) -> float:
    """Job dollars (``cost``; memory at ``memory_gb``, else the cell's own peak: the grid
    carries no slack, the recommendation pays for what it requests) or job seconds."""
    if preference == "time":
        return cell.time_s
    if preference == "cost":
        memory = cell.peak if memory_gb is None else memory_gb
        return prices.cost(cell.setting.cpus, memory, cell.time_s)
    raise ValueError(f"unknown preference {preference!r}")


def target_loss(cells: Iterable[CellRuns], default_batch: int,
                cpus: int | None = None) -> float | None:
    """L0: the final loss of the script's own batch on ``cpus`` CPUs where that cell ran;
    else (and with ``cpus`` None) the mean over CPU counts."""
    own = {c.setting.cpus: c.loss for c in cells
           if c.setting.batch == default_batch and not c.setting.extra and c.loss is not None}
    if cpus in own:
        return float(own[cpus])
    return float(statistics.mean(own.values())) if own else None


def trains_as_well(loss: float | None, l0: float | None,
                   tolerance: float = LOSS_TOLERANCE) -> bool | None:
    """Whether ``loss`` is within ``tolerance`` of ``l0`` or lower; None if either is unknown."""
    if loss is None or l0 is None:
        return None
    return loss <= l0 + tolerance * abs(l0)


def cell_trains_as_well(cell: CellRuns, cells: Sequence[CellRuns],
                        default_batch: int) -> bool | None:
    """:func:`trains_as_well` against the script's own batch on the cell's CPUs."""
    return trains_as_well(cell.loss, target_loss(cells, default_batch, cell.setting.cpus))


def optimum(cells: Sequence[CellRuns], judge: Callable[[CellRuns], bool | None],
            preference: str, prices: Prices) -> CellRuns | None:
    """The grid's best cell by ``preference`` among those ``judge`` says train as well (the
    corpus: :func:`cell_trains_as_well`); None if none. Cells of another length (``extra``)
    count where the grid has them: a recommendation that changes the steps is scored against
    every batch at that length too (:func:`length_cells`)."""
    good = [c for c in cells if judge(c)]
    return min(good, key=lambda c: objective(c, preference, prices), default=None)


def regret(value: float, best: float) -> float:
    """``value / best - 1``: 0 at the optimum; inf where the best is free or unknown."""
    if not math.isfinite(best) or best <= 0:
        return math.inf
    return value / best - 1.0


def claim_error(claimed: float | None, measured: float | None) -> float | None:
    """``claimed / measured - 1`` (positive: cloudopt claimed more than the job took)."""
    if claimed is None or measured is None or measured <= 0:
        return None
    return claimed / measured - 1.0


# ------------------------------------------------------------------------------ command lines
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_OVERRIDE_KEY = re.compile(r"[A-Za-z_][\w.\-/@]*")


def arg_key(arg: str) -> str | None:
    """The setting an argument names, or None for a value or a positional argument:
    ``--epochs`` and ``--epochs=3`` name ``--epochs``; the Hydra overrides
    ``data.batch_size=64``, ``+data.batch_size=64`` and ``++data.batch_size=64`` all name
    ``data.batch_size``. A negative number is a value, not a flag."""
    if arg.startswith("-"):
        return None if _NUMBER.fullmatch(arg) else arg.split("=", 1)[0]
    if "=" in arg:
        key = arg.split("=", 1)[0].lstrip("+")
        return key if _OVERRIDE_KEY.fullmatch(key) else None
    return None


def flag_args(flag: str, value: Any) -> list[str]:
    """One setting as arguments, in the flag's form: ``--epochs`` gives ``["--epochs", "3"]``;
    a template gives one argument, ``--batch_size={}`` ``["--batch_size=3"]`` and
    ``data.batch_size={}`` ``["data.batch_size=3"]``. An integral number is written as an
    integer (``3``, not ``3.0``: ``--max_iters=3.0`` fails a script that wants an int)."""
    text = _number_text(value)
    if "{" in flag:
        return [flag.replace("{batch_size}", text).replace("{}", text)]
    return [flag, text]


def _number_text(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value)


def with_args(base: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``base`` with ``extra``'s settings (``--epochs 3``, ``--max_iters=3``,
    ``trainer.max_epochs=3``) replacing those it gives already, in either form."""
    keys = {k for k in map(arg_key, extra) if k is not None}
    out, skip = [], False
    for a in base:
        if skip:
            skip = False
        elif a in keys:
            skip = True  # "--flag VALUE": its value goes with it
        elif arg_key(a) not in keys:
            out.append(a)
    return out + list(extra)


def run_args(s: WildScript, batch: int | None = None, length: float | None = None,
             base: Sequence[str] = (), extra: Sequence[str] = ()) -> list[str]:
    """The arguments of a whole run of ``s`` at batch ``batch`` for ``length`` (epochs or
    steps, the script's own unit): the manifest's ``base_args`` first (a subcommand, a
    config file), then ``base`` (``quick_args``), the length flag, ``extra`` (a
    recommendation's length arguments) and the batch flag, each replacing the same setting
    given before. ``None`` leaves the script's default.

    >>> s = WildScript("h", Path("h.py"), "data.batch_size={}", 64,
    ...                epochs_flag="trainer.max_epochs={}", default_epochs=5)
    >>> run_args(s, 128, 2, base=["trainer.max_epochs=1"])
    ['trainer.max_epochs=2', 'data.batch_size=128']
    """
    args = with_args(s.base_args, list(base))
    if length is not None:
        if s.length_flag is None:
            raise ValueError(f"{s.name}: the manifest names no epochs or steps flag")
        args = with_args(args, flag_args(s.length_flag, length))
    args = with_args(args, list(extra))
    if batch is not None:
        args = with_args(args, flag_args(s.batch_flag, int(batch)))
    return args


# ------------------------------------------------------------------------------ cloudopt's answer

def read_recommendation(run_dir: Path, s: WildScript,
                        base_args: Sequence[str] = ()) -> dict[str, Any]:
    """What cloudopt's run folder says (cloudopt given the script arguments ``base_args``):
    the setting (CPUs, batch, epoch arguments), the claimed job time and cost, whether a
    workload model was fitted (``workload_fit`` with an R² of the throughput) and whether
    agents trained (``policies`` with episodes)."""
    path = run_dir / "recommendation.json"
    if not path.exists():
        return {"recommendation": None}
    rec = json.loads(path.read_text(encoding="utf-8"))
    alloc = rec.get("allocation") or {}
    fit = rec.get("workload_fit") or {}
    agents = {p.get("name"): p.get("share_of_optimum") for p in rec.get("policies") or []
              if (p.get("episodes") or 0) > 0}
    return {
        "recommendation": str(path),
        "setting": Setting(int(alloc.get("cpus") or 1),
                           int(alloc.get("batch_size") or s.default_batch),
                           tuple(job_args(rec, run_dir, s, base_args))),
        "gpus": int(alloc.get("gpus") or 0), "memory_gb": float(alloc.get("memory_gb") or 0.0),
        **claimed(rec), "source": rec.get("agent"),
        "fitted": fit.get("r2_throughput") is not None, "fit_r2": fit.get("r2_throughput"),
        "fit_trials": fit.get("n_trials"), "agents": bool(agents), "agent_shares": agents,
        "job_length": rec.get("job_length"),
    }


def claimed(rec: dict[str, Any]) -> dict[str, Any]:
    """The whole job's time and cost cloudopt claims for its recommendation, from the first
    entry of the recommendation that holds them (named in ``claim_from``):

    ``measured`` (the chosen row); the run-off's winner; the statistical-efficiency
    comparison's ``recommended`` row (the time and cost to the loss the script's own batch
    ends at); the final trial's whole run (priced at the memory limit it ran under)."""
    m = rec.get("measured") or {}
    top = (rec.get("runoff_standings") or [{}])[0]
    rows = (rec.get("goodput") or {}).get("comparison") or []
    goodput = next((r for r in rows if r.get("role") == "recommended"), {})
    pvm = rec.get("predicted_vs_measured") or {}
    for source, time_s, cost in (
            ("measured", m.get("job_time_s"), m.get("job_cost")),
            ("runoff_standings", top.get("job_time_s"), top.get("job_cost")),
            ("goodput", goodput.get("time_to_same_progress_s"),
             goodput.get("cost_to_same_progress")),
            ("predicted_vs_measured", (pvm.get("job_time_s") or {}).get("measured"),
             (pvm.get("job_cost") or {}).get("measured"))):
        if time_s is not None:
            return {"claimed_time_s": time_s, "claimed_cost": cost, "claim_from": source}
    return {"claimed_time_s": None, "claimed_cost": None, "claim_from": None}


def job_args(rec: dict[str, Any], run_dir: Path, s: WildScript,
             base_args: Sequence[str]) -> list[str]:
    """The arguments that change the job's length: ``job_length.args`` where the
    recommendation carries them; else the length flag's (epochs or steps) value in the job
    ``k8s-resources.yaml`` runs, where it differs from the job cloudopt was given."""
    if "job_length" in rec:
        return [str(a) for a in (rec["job_length"] or {}).get("args") or []]
    flag = s.length_flag
    value = flag_value(k8s_args(run_dir / "k8s-resources.yaml"), flag) if flag else None
    if flag is None or value is None:
        return []
    default = s.default_length
    own = flag_value(base_args, flag) or (_number_text(default) if default else None)
    same = own is not None and _finite(own) == _finite(value)
    return [] if same else flag_args(flag, value)


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value the last ``flag VALUE`` or ``flag=VALUE`` of ``args`` gives, or None; for a
    template (``--max_iters={}``, ``trainer.max_steps={}``) the text in place of ``{}``
    (a Hydra ``+``/``++`` prefix allowed)."""
    if "{" in flag:
        head, _, tail = flag.partition("{")
        tail = tail.split("}", 1)[1] if "}" in tail else ""
        value = None
        for a in args:
            bare = a.lstrip("+") if not head.startswith("+") else a
            if bare.startswith(head) and bare.endswith(tail) and len(bare) >= len(head + tail):
                value = bare[len(head):len(bare) - len(tail)]
        return value
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def k8s_args(path: Path) -> list[str]:
    """The ``args:`` list of a ``k8s-resources.yaml`` (one quoted string a line)."""
    if not path.exists():
        return []
    out, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("args:"):
            inside = True
        elif inside and line.lstrip().startswith("- "):
            out.append(json.loads(line.lstrip()[2:]))
        elif inside:
            break
    return out


# ------------------------------------------------------------------------------ the probe
def abba_order(rounds: int) -> list[bool]:
    """Whether each run has the probe on: off, on, on, off per round, so a drift in the
    machine's load over the measurement hits both kinds alike."""
    return [False, True, True, False] * rounds


def overhead(plain: Sequence[float], probed: Sequence[float]) -> float | None:
    """median(probed) / median(plain) - 1, or None without both."""
    if not plain or not probed:
        return None
    base = statistics.median(plain)
    return statistics.median(probed) / base - 1.0 if base > 0 else None


# ------------------------------------------------------------------------------ the table
def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else f"{100 * x:+.1f}%"


def _yes(x: bool | None) -> str:
    return "-" if x is None else ("yes" if x else "no")


def table_row(r: dict[str, Any]) -> list[str]:
    """One script's row of the table, from the figures ``wild.score`` records."""
    loss, l0 = r.get("pick_loss"), r.get("l0")
    well = _yes(r.get("pick_trains_as_well"))
    if loss is not None and l0 is not None:
        well += f" ({loss:.4g} vs {l0:.4g})"
    code = r.get("exit")
    # a script that prints only its training loss is judged by it: say so beside its name
    name = r["script"] + (" (train loss)" if r.get("loss_kind") == "train" else "")
    return [name, "-" if code is None else str(code), _yes(r.get("fitted")),
            _yes(r.get("agents")), r.get("pick") or "-", well, _pct(r.get("regret")),
            _pct(r.get("claim_time")), _pct(r.get("claim_cost")), _pct(r.get("probe_time")),
            _pct(r.get("probe_memory"))]


HEADER = ["script", "exit", "fitted", "agents", "pick (cpus×batch)", "trains as well",
          "regret", "claim err time", "claim err cost", "probe time", "probe mem"]


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table (ready for ``benchmarks/README.md``), then the median
    and worst regret over the scripts that have one."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(table_row(r)) + " |" for r in rows]
    med, worst = regret_summary([r.get("regret") for r in rows])
    lines.append(f"\nregret over {sum(r.get('regret') is not None for r in rows)} scripts: "
                 f"median {_pct(med)}, worst {_pct(worst)}")
    return "\n".join(lines)


def regret_summary(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """(median, worst) of the known regrets."""
    known = [v for v in values if v is not None]
    if not known:
        return None, None
    return float(statistics.median(known)), max(known)

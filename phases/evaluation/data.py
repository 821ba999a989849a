"""Executions for the autoscaling evaluation: read from a trace file, split by execution id.

Splits are by execution, never by sample, so no test execution is seen while fitting.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from optimizer.foundation.errors import CloudoptError
from phases.policies import Execution


def load_executions(
    path: str | Path,
    exec_id: str,
    features: Sequence[str],
    *,
    resources: Sequence[str] | None = None,
    time: str | None = None,
    cycle_s: float = 600.0,
) -> list[Execution]:
    """Read a trace file into :class:`Execution` objects split into ``cycle_s`` cycles.

    Cleaning follows :func:`phases.traces.read_traces` (sorted by time, NaNs filled within an
    execution, exit samples dropped). ``features`` feed the phase model; ``resources`` (default:
    the features) are the columns that get allocations. Without ``time`` the samples are taken
    to be one second apart (so ``cycle_s`` counts samples), with a warning.
    """
    from phases.traces import read_traces

    features = [str(f) for f in features]
    resources = [str(r) for r in (resources or features)]
    if cycle_s <= 0:
        raise CloudoptError(f"--cycle must be positive, got {cycle_s}")
    columns = features + [r for r in resources if r not in features]
    traces = read_traces(path, exec_id, columns, time)
    if time is None:
        warnings.warn(f"{path}: no time column given; samples are taken as 1 s apart", stacklevel=2)
    f_idx = [columns.index(f) for f in features]
    r_idx = [columns.index(r) for r in resources]
    out = []
    for eid, t, x in zip(traces.exec_ids, traces.times, traces.arrays, strict=True):
        t = np.asarray(t, dtype=np.float64)
        if np.any(np.diff(t) <= 0):  # duplicated timestamps: keep the later sample's slot
            t = t + np.arange(len(t)) * 1e-6
        out.append(
            Execution.from_arrays(
                eid, t, x[:, r_idx], cycle_s, resources, features=x[:, f_idx].copy()
            )
        )
    return out


def read_groups(path: str | Path, exec_id: str, group: str) -> dict[str, str]:
    """Execution id → group (e.g. workload) from two columns of a trace file."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, usecols=[exec_id, group])
    except ValueError as exc:
        raise CloudoptError(f"{path}: cannot read group column {group!r}: {exc}") from None
    pairs = frame.drop_duplicates()
    clash = pairs[exec_id][pairs[exec_id].duplicated()]
    if len(clash):
        raise CloudoptError(f"{path}: execution {clash.iloc[0]!r} has more than one {group!r}")
    return {str(k): str(v) for k, v in zip(pairs[exec_id], pairs[group], strict=True)}


def attach_previous_runs(executions: Sequence[Execution], jobs: dict[str, str]) -> int:
    """Give each execution the usage of the previous run of the same job (``jobs``: execution
    id → job, e.g. the workload column; runs in the order given) as
    :attr:`Execution.prior_usage`; returns how many got one."""
    last: dict[str, Execution] = {}
    n = 0
    for e in executions:
        job = jobs.get(e.exec_id)
        if job is None:
            continue
        before = last.get(job)
        e.prior_usage = None if before is None else before.usage.copy()
        n += before is not None
        last[job] = e
    return n


def split_executions(
    executions: Sequence[Execution], test_fraction: float = 0.1, seed: int = 0
) -> tuple[list[Execution], list[Execution]]:
    """Random split by execution id: ``max(1, round(test_fraction · n))`` executions for test."""
    n = len(executions)
    if not 0.0 < test_fraction < 1.0:
        raise CloudoptError(f"--test-fraction must be in (0, 1), got {test_fraction}")
    if n < 2:
        raise CloudoptError(f"need at least 2 executions to split, found {n}")
    n_test = min(max(1, round(test_fraction * n)), n - 1)
    order = np.random.default_rng(seed).permutation(
        sorted(range(n), key=lambda i: executions[i].exec_id)
    )
    test = set(order[:n_test].tolist())
    return (
        [e for i, e in enumerate(executions) if i not in test],
        [e for i, e in enumerate(executions) if i in test],
    )


def kfold_executions(
    executions: Sequence[Execution], n_folds: int, seed: int = 0
) -> list[tuple[list[Execution], list[Execution]]]:
    """``n_folds`` (train, test) splits by execution id; every execution is tested once."""
    n = len(executions)
    if not 2 <= n_folds <= n:
        raise CloudoptError(f"--folds must be between 2 and {n} executions, got {n_folds}")
    order = np.random.default_rng(seed).permutation(
        sorted(range(n), key=lambda i: executions[i].exec_id)
    )
    folds = np.array_split(order, n_folds)
    out = []
    for fold in folds:
        held = set(fold.tolist())
        out.append(
            (
                [e for i, e in enumerate(executions) if i not in held],
                [e for i, e in enumerate(executions) if i in held],
            )
        )
    return out


def group_folds(
    executions: Sequence[Execution], groups: dict[str, str]
) -> list[tuple[list[Execution], list[Execution]]]:
    """Leave-one-group-out splits: each group's executions are tested by the others'.

    ``groups`` maps execution id → group (e.g. the workload); one (train, test) split per
    group, in sorted group order, so nothing fitted has seen the held-out group.
    """
    missing = sorted({e.exec_id for e in executions} - set(groups))
    if missing:
        raise CloudoptError(f"no group for executions {', '.join(missing[:5])}")
    names = sorted({groups[e.exec_id] for e in executions})
    if len(names) < 2:
        raise CloudoptError(f"leave-one-group-out needs at least 2 groups, found {names}")
    return [
        (
            [e for e in executions if groups[e.exec_id] != g],
            [e for e in executions if groups[e.exec_id] == g],
        )
        for g in names
    ]

"""Reading resource traces into per-execution arrays, and the feature scaler.

A trace file is a table with one row per monitoring sample: an execution id column, an optional
time column and numeric feature columns (CPU, memory, GPU utilisation...). :func:`read_traces`
turns it into a :class:`TraceSet`: one ``(n_samples, n_features)`` float array per execution,
sorted by time, with the original row positions kept so that predictions map back to rows.

Cleaning rules (applied per execution, in this order)
-----------------------------------------------------
1. Rows whose execution id is missing are dropped.
2. Rows are sorted by the time column (stable, so ties keep file order); date-time text is
   read as seconds since the Unix epoch; rows whose time is missing or unreadable are dropped.
   Without a time column the file order is the time order.
3. Feature values that are not finite numbers (NaN, empty, text, inf) are never invented: by
   default the table is refused with a :class:`TraceFormatError` naming the column and line of
   each (``invalid="refuse"``); with ``invalid="drop"`` (the CLI's ``--drop-invalid``) those
   rows are dropped, with a warning that counts and names them.
4. Gaps in time are *not* filled: consecutive samples are consecutive CRBM steps whatever their
   spacing, as in AI4DL (monitors sample at a roughly fixed period).
5. ``drop_exit_samples=True`` drops trailing samples at which a feature that is positive for
   most of the execution (median > 0) reads exactly 0: the process was exiting when the sample
   was taken (e.g. resident memory 0 GiB on the last sample).
6. An execution with fewer than ``min_length`` samples (``delay + 1`` for a CRBM) is skipped
   with a warning naming it.

:class:`FeatureScaler` is scikit-learn's ``StandardScaler`` fitted on the training samples,
saved as JSON (``to_json``/``from_json``) so a model directory never needs pickle.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.preprocessing import StandardScaler

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.foundation.errors import ModelFileError, TraceFormatError

__all__ = ["TraceSet", "read_traces", "traces_from_frame", "FeatureScaler"]


@dataclass
class TraceSet:
    """Per-execution feature arrays read from one trace table.

    Attributes
    ----------
    arrays : list of ndarray of shape (n_samples_i, n_features), float64
        One array per execution, rows in time order, unscaled.
    exec_ids : list of str
        Execution id of each array.
    times : list of ndarray of shape (n_samples_i,)
        Time of each sample (the row position within the execution when there is no time column).
    rows : list of ndarray of shape (n_samples_i,), int64
        0-based position of each sample among the data rows of the source table.
    features : list of str
        Feature column names, the order of the array columns.
    exec_id_col, time_col : str or None
        Column names the set was read with.
    n_rows : int
        Number of data rows in the source table (including dropped ones).
    source : str or None
        File the set was read from.
    """

    arrays: list[np.ndarray]
    exec_ids: list[str]
    times: list[np.ndarray]
    rows: list[np.ndarray]
    features: list[str]
    exec_id_col: str | None = None
    time_col: str | None = None
    n_rows: int = 0
    source: str | None = None
    skipped: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.arrays)

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self.arrays)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.arrays[i]

    @property
    def n_samples(self) -> int:
        return int(sum(len(a) for a in self.arrays))

    def subset(self, indices: Sequence[int]) -> TraceSet:
        """The executions at ``indices`` (e.g. a train/test split), same columns and source."""
        idx = list(indices)
        return TraceSet(
            arrays=[self.arrays[i] for i in idx],
            exec_ids=[self.exec_ids[i] for i in idx],
            times=[self.times[i] for i in idx],
            rows=[self.rows[i] for i in idx],
            features=list(self.features),
            exec_id_col=self.exec_id_col,
            time_col=self.time_col,
            n_rows=self.n_rows,
            source=self.source,
        )

    def per_sample(self, sequences: Sequence[np.ndarray], name: str = "phase") -> pd.DataFrame:
        """A table with one row per kept sample: row, exec id, time and ``sequences`` values.

        ``sequences`` holds one array per execution, as long as the execution (the output of
        :meth:`phases.PhaseDetector.predict`).
        """
        if len(sequences) != len(self.arrays):
            raise ValueError(f"{len(sequences)} sequences for {len(self.arrays)} executions")
        parts = []
        for eid, t, r, s in zip(self.exec_ids, self.times, self.rows, sequences, strict=True):
            parts.append(pd.DataFrame({"row": r, "exec_id": eid, "time": t, name: s}))
        if not parts:
            return pd.DataFrame({"row": [], "exec_id": [], "time": [], name: []})
        return pd.concat(parts, ignore_index=True)


def _load_table(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise TraceFormatError(f"{path}: trace file not found")
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
        # pandas takes a leading field with no header name as the index (AI4DL's sample-vr.csv
        # has one); the data rows keep their order, which is all we use.
        return pd.read_csv(path)
    except ImportError as exc:
        raise TraceFormatError(f"{path}: cannot read Parquet ({exc}); install pyarrow") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise TraceFormatError(f"{path}: not a readable CSV/Parquet table ({exc})") from None
    except Exception as exc:  # pyarrow raises its own error types for corrupt files
        raise TraceFormatError(
            f"{path}: not a readable table ({type(exc).__name__}: {exc})"
        ) from None


def _check_columns(frame: pd.DataFrame, needed: Sequence[str], where: str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        available = ", ".join(map(str, frame.columns))
        raise TraceFormatError(
            f"{where}: column(s) {', '.join(map(repr, missing))} not found; "
            f"available columns: {available}"
        )


def read_traces(
    path: str | os.PathLike,
    exec_id: str,
    features: Sequence[str],
    time: str | None = None,
    *,
    min_length: int = 1,
    drop_exit_samples: bool = True,
    invalid: str = "refuse",
) -> TraceSet:
    """Read a CSV or Parquet trace table into per-execution arrays.

    Parameters
    ----------
    path : path-like
        ``.csv`` (any other suffix is read as CSV) or ``.parquet``/``.pq`` file.
    exec_id : str
        Column holding the execution id (e.g. ``exec_id``, AI4DL's ``pod.id``).
    features : sequence of str
        Numeric feature columns, in the order the arrays' columns will have.
    time : str, optional
        Column to sort samples by within an execution; file order when omitted.
    min_length : int, default=1
        Executions with fewer kept samples are skipped with a warning (use ``delay + 1``).
    drop_exit_samples : bool, default=True
        Drop trailing samples of a dying process (see the module docstring, rule 5).
    invalid : {"refuse", "drop"}, default="refuse"
        What to do with feature values that are not finite numbers (text, empty, NaN, inf):
        refuse the file, naming column and line of each, or drop those rows with a warning.
        They are never filled in.

    Returns
    -------
    TraceSet

    Raises
    ------
    TraceFormatError
        The file cannot be read, or a named column is missing (the message lists the available
        columns), or no execution is left.
    """
    path = Path(path)
    frame = _load_table(path)
    return traces_from_frame(
        frame,
        exec_id,
        features,
        time,
        min_length=min_length,
        drop_exit_samples=drop_exit_samples,
        source=str(path),
        invalid=invalid,
    )


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(value)
    if value is None or pd.isna(value):
        return "empty"
    try:
        return format(float(value), "g")
    except (TypeError, ValueError):
        return str(value)


def _invalid_message(data: pd.DataFrame, features: Sequence[str], bad: pd.DataFrame,
                     where: str, file_lines: bool, shown: int = 5) -> str:
    """``where: N invalid value(s) in R row(s): column 'c' line 7 ('abc'), ...``. A file's line
    is its data row + 2 (the header is line 1)."""
    places = []
    for col in features:
        for i in np.flatnonzero(bad[col].to_numpy()):
            places.append((i, col))
    places.sort()
    unit, offset = ("line", 2) if file_lines else ("row", 0)
    listed = ", ".join(f"column {col!r} {unit} {i + offset} ({_shown(data[col].iloc[i])})"
                       for i, col in places[:shown])
    more = f" and {len(places) - shown} more" if len(places) > shown else ""
    rows = int(bad.any(axis=1).sum())
    return (f"{where}: {len(places)} invalid value(s) (not a finite number) in {rows} row(s): "
            f"{listed}{more}")


def traces_from_frame(
    frame: pd.DataFrame,
    exec_id: str,
    features: Sequence[str],
    time: str | None = None,
    *,
    min_length: int = 1,
    drop_exit_samples: bool = True,
    source: str | None = None,
    invalid: str = "refuse",
) -> TraceSet:
    """Split a DataFrame (one row per sample) into a :class:`TraceSet`; see :func:`read_traces`."""
    where = source or "trace table"
    features = [str(f) for f in features]
    if not features:
        raise TraceFormatError(f"{where}: no feature columns given")
    _check_columns(frame, [exec_id, *features] + ([time] if time else []), where)
    if invalid not in ("refuse", "drop"):
        raise ValueError(f"invalid must be 'refuse' or 'drop' (got {invalid!r})")
    data = frame.reset_index(drop=True)
    values = data[features].apply(pd.to_numeric, errors="coerce")
    values = values.where(np.isfinite(values.to_numpy(dtype=np.float64, na_value=np.nan)))
    bad = values.isna()
    if bad.to_numpy().any():
        message = _invalid_message(data, features, bad, where, file_lines=source is not None)
        if invalid == "refuse":
            raise TraceFormatError(message + "; fix them, or drop those rows (--drop-invalid)")
        warnings.warn(message + "; those rows are dropped", stacklevel=2)
        keep = ~bad.any(axis=1)
        data, values = data[keep], values[keep]
    table = pd.DataFrame({"_row": data.index.to_numpy(dtype=np.int64), "_id": data[exec_id]},
                         index=data.index)
    table["_t"] = _time_values(data[time]) if time else table["_row"]
    table = pd.concat([table, values.set_axis(features, axis=1)], axis=1)
    table = table[table["_id"].notna() & table["_t"].notna()]
    # executions in order of first appearance in the file, samples in time order within each
    table["_order"] = pd.factorize(table["_id"])[0]
    table = table.sort_values(["_order", "_t"], kind="stable")

    out = TraceSet([], [], [], [], features, exec_id, time, n_rows=len(data), source=source)
    short: list[str] = []
    for eid, group in table.groupby("_id", sort=False):
        eid = str(eid)
        x = group[features].to_numpy(dtype=np.float64)  # finite: checked above, never filled
        keep = _exit_trim(x) if drop_exit_samples else len(x)
        if keep < min_length:
            short.append(f"{eid} ({keep})")
            out.skipped.append(eid)
            continue
        out.arrays.append(x[:keep])
        out.exec_ids.append(eid)
        out.times.append(group["_t"].to_numpy(dtype=np.float64)[:keep])
        out.rows.append(group["_row"].to_numpy(dtype=np.int64)[:keep])
    if short:
        warnings.warn(
            f"{where}: {len(short)} execution(s) shorter than {min_length} samples skipped: "
            + ", ".join(short),
            stacklevel=2,
        )
    if not out.arrays:
        raise TraceFormatError(
            f"{where}: no execution with at least {min_length} usable samples "
            f"(column {exec_id!r}, features {features})"
        )
    return out


def _time_values(column: pd.Series) -> pd.Series:
    """Numeric times as they are; date-time text or values as seconds since the Unix epoch."""
    if pd.api.types.is_numeric_dtype(column):
        return column.astype(np.float64)
    numeric = pd.to_numeric(column, errors="coerce")
    if numeric.notna().any():
        return numeric
    stamps = pd.to_datetime(column, errors="coerce", utc=True)
    seconds = (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    return seconds


def _exit_trim(x: np.ndarray) -> int:
    """Number of leading samples to keep: drop trailing samples where a usually-positive feature
    reads exactly 0 (a process caught while exiting)."""
    if len(x) < 3:
        return len(x)
    usually_positive = np.median(x, axis=0) > 0
    dead = (x == 0) & usually_positive
    keep = len(x)
    while keep > 1 and dead[keep - 1].any():
        keep -= 1
    return keep


class FeatureScaler:
    """Standardise features with scikit-learn's ``StandardScaler``; saved as JSON.

    Parameters
    ----------
    features : sequence of str, optional
        Feature names, stored with the statistics so a mismatched model is detected on load.
    """

    def __init__(self, features: Sequence[str] | None = None) -> None:
        self.features = list(features) if features is not None else None
        self.scaler = StandardScaler()

    def fit(self, arrays: Sequence[np.ndarray]) -> FeatureScaler:
        """Fit on all samples of ``arrays`` (each ``(n_samples_i, n_features)``)."""
        self.scaler.fit(np.concatenate([np.asarray(a, dtype=np.float64) for a in arrays]))
        return self

    def transform(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Scale each array with the training mean and standard deviation."""
        return [self.scaler.transform(np.asarray(a, dtype=np.float64)) for a in arrays]

    def transform_flat(self, x: np.ndarray, dtype: type = np.float32) -> np.ndarray:
        """Scale one ``(n_samples, n_features)`` array straight to ``dtype`` (the inference
        path: no per-call validation, one pass)."""
        s = self.scaler
        return ((x - s.mean_) / s.scale_).astype(dtype, copy=False)

    def inverse_transform(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [self.scaler.inverse_transform(np.asarray(a, dtype=np.float64)) for a in arrays]

    @property
    def n_features(self) -> int:
        return int(self.scaler.n_features_in_)

    def to_dict(self) -> dict:
        s = self.scaler
        return {
            "features": self.features,
            "mean": s.mean_.tolist(),
            "scale": s.scale_.tolist(),
            "var": s.var_.tolist(),
            "n_samples_seen": int(np.max(s.n_samples_seen_)),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "scaler") -> FeatureScaler:
        try:
            mean = np.asarray(data["mean"], dtype=np.float64)
            scale = np.asarray(data["scale"], dtype=np.float64)
            var = np.asarray(data["var"], dtype=np.float64)
            n_seen = int(data["n_samples_seen"])
            features = data.get("features")
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFileError(f"{where}: malformed scaler ({exc!r})") from None
        if not (mean.ndim == 1 and mean.shape == scale.shape == var.shape) or not np.all(scale > 0):
            raise ModelFileError(f"{where}: scaler arrays have mismatched shapes or bad scales")
        out = cls(features)
        s = out.scaler
        s.mean_, s.scale_, s.var_ = mean, scale, var
        s.n_samples_seen_ = n_seen
        s.n_features_in_ = len(mean)
        return out

    def to_json(self, path: str | os.PathLike) -> None:
        atomic_write_json(path, self.to_dict())

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> FeatureScaler:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelFileError(f"{path}: scaler file not found") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelFileError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ModelFileError(f"{path}: expected a JSON object")
        return cls.from_dict(data, where=str(path))

"""Reports as Markdown and as one self-contained HTML page.

A :class:`Report` is a list of blocks (headings, paragraphs, tables, figures) rendered twice:
``report.md`` links its PNG figures by relative path, ``report.html`` embeds them as base64 data
URIs so the page can be mailed or attached to a ticket on its own. Both files are written
atomically.
"""

from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_text

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#1f2328;line-height:1.45}
h1{border-bottom:2px solid #d0d7de;padding-bottom:.3em}h2{border-bottom:1px solid #d0d7de;
padding-bottom:.2em;margin-top:1.8em}
.scroll{overflow-x:auto;max-width:100%}p,.answer{overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.8em 0;font-size:.92em}
.answer{background:#ddf4ff;border:1px solid #54aeff;padding:.6em 1em;border-radius:6px}
th,td{border:1px solid #d0d7de;padding:4px 9px;text-align:right}
th{background:#f6f8fa}td:first-child,th:first-child{text-align:left}
figure{margin:1em 0}img{max-width:100%;border:1px solid #eee}
figcaption{color:#57606a;font-size:.9em}
.note{background:#fff8c5;border:1px solid #d4a72c;padding:.5em .8em;border-radius:4px}
code{background:#f6f8fa;padding:1px 4px;border-radius:3px}
"""


_UNITS = {"_s": " (s)", "_gb": " (GB)", "_pct": " (%)", "_usd": " ($)"}
_WORDS = {"job_cost": "job cost ($)", "hourly_cost": "$ per hour", "cost": "cost ($)",
          "cpus": "CPUs", "gpus": "GPUs", "mem_gb_peak": "peak memory (GB)",
          "cpu_util_pct": "CPU use (%)", "r_cost": "reward: cost", "r_time": "reward: time",
          "r_efficiency": "reward: efficiency", "r_sla": "reward: SLA"}


def human_header(name: str) -> str:
    """``job_time_s`` -> ``job time (s)``: snake_case and unit suffixes read as words."""
    if name in _WORDS:
        return _WORDS[name]
    for suffix, unit in _UNITS.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)].replace("_", " ") + unit
    return name.replace("_", " ")


def format_value(value: Any) -> str:
    """A cell for people: floats with 4 significant digits, None/NaN as an em dash, yes/no,
    lists joined with commas ("none" when empty), a (before, after) pair as "before → after";
    never a Python repr."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy scalars
        value = value.item()
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple) and len(value) == 2:
        return f"{format_value(value[0])} → {format_value(value[1])}"
    if isinstance(value, (list, tuple, set)):
        return ", ".join(format_value(v) for v in value) if value else "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-9):
            return f"{value:.3e}"
        if value != 0 and abs(value) < 1e-3:  # small prices: 0.0000867, not 8.666e-05
            return f"{value:.{2 - math.floor(math.log10(abs(value)))}f}"
        if abs(value) >= 1e4:  # samples/s: 10,320, not 1.032e+04
            return f"{value:,.0f}"
        return f"{value:.4g}"
    return str(value)


def dollars(value: float | None) -> str:
    """``$0.0000867``, ``$0.0123``, ``$12.35``: a price as people read it ("n/a" when
    missing)."""
    if not _is_number(value):
        return MISSING
    return "$" + format_value(float(value))


MISSING = "n/a"
"""What a sentence of the report says in place of a figure it does not have (a fit without an
R², a run that recorded no trace): the report renders what it has, never a traceback."""


def _is_number(value: Any) -> bool:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy scalars
        value = value.item()
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        not math.isnan(value)  # inf is a figure (an SLA without a limit), NaN is none


def fmt(value: Any, spec: str = ".4g", scale: float = 1.0, unit: str = "") -> str:
    """``value × scale`` formatted by ``spec`` with ``unit`` after it, or "n/a" where the
    value is missing (None, NaN, not a number): ``fmt(fit.get("r2_throughput"), ".3f")``."""
    if not _is_number(value):
        return MISSING
    return format(float(value) * scale, spec) + unit


@dataclass
class _Block:
    kind: str
    text: str = ""
    level: int = 2
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    path: Path | None = None


class Report:
    """Build a report block by block, then :meth:`write` it as Markdown and HTML."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.blocks: list[_Block] = []

    def heading(self, text: str, level: int = 2) -> Report:
        self.blocks.append(_Block("heading", text=text, level=level))
        return self

    def paragraph(self, text: str) -> Report:
        self.blocks.append(_Block("paragraph", text=text))
        return self

    def answer(self, text: str) -> Report:
        """The report's first block: its first line in bold, the rest below it."""
        self.blocks.append(_Block("answer", text=text))
        return self

    def note(self, text: str) -> Report:
        """A highlighted paragraph (warnings such as an SLA no configuration can meet)."""
        self.blocks.append(_Block("note", text=text))
        return self

    def table(self, rows: Any, columns: Sequence[str] | None = None) -> Report:
        """A table from a DataFrame, a list of dicts, or a list of lists with ``columns``."""
        if hasattr(rows, "to_dict"):
            columns = [str(c) for c in rows.columns]
            body = rows.astype(object).values.tolist()
        else:
            rows = list(rows)
            if not rows and columns is None:
                return self  # nothing to show: no empty table without a header
            if rows and isinstance(rows[0], Mapping):
                columns = list(columns or dict.fromkeys(k for r in rows for k in r))
                body = [[r.get(c) for c in columns] for r in rows]
            else:
                if columns is None:
                    raise ValueError("a table of lists needs its column names")
                body = [list(r) for r in rows]
        self.blocks.append(_Block("table", columns=list(columns or []), rows=body))
        return self

    def figure(self, path: str | os.PathLike, caption: str = "") -> Report:
        self.blocks.append(_Block("figure", text=caption, path=Path(path)))
        return self

    # ---------------------------------------------------------------- rendering
    def to_markdown(self, base: Path) -> str:
        out = [f"# {self.title}", ""]
        for b in self.blocks:
            if b.kind == "heading":
                out += ["#" * b.level + " " + b.text, ""]
            elif b.kind == "paragraph":
                out += [b.text, ""]
            elif b.kind == "note":
                out += ["> **Note.** " + b.text, ""]
            elif b.kind == "answer":
                first, _, rest = b.text.partition("\n")
                out += [f"**{first}**", ""] + [f"- {x}" for x in rest.splitlines()] + [""]
            elif b.kind == "table":
                out.append("| " + " | ".join(human_header(c) for c in b.columns) + " |")
                out.append("|" + "---|" * len(b.columns))
                for r in b.rows:
                    cells = [format_value(v).replace("|", "\\|") for v in r]
                    out.append("| " + " | ".join(cells) + " |")
                out.append("")
            elif b.kind == "figure":
                assert b.path is not None
                rel = os.path.relpath(b.path, base)
                out += [f"![{b.text}]({rel})", "", f"*{b.text}*" if b.text else "", ""]
        return "\n".join(out).rstrip() + "\n"

    def to_html(self) -> str:
        esc = html.escape
        out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
               f"<title>{esc(self.title)}</title><style>{_CSS}</style></head><body>",
               f"<h1>{esc(self.title)}</h1>"]
        for b in self.blocks:
            if b.kind == "heading":
                level = min(max(b.level, 2), 6)
                out.append(f"<h{level}>{esc(b.text)}</h{level}>")
            elif b.kind == "paragraph":
                out.append(f"<p>{esc(b.text)}</p>")
            elif b.kind == "note":
                out.append(f'<p class="note"><b>Note.</b> {esc(b.text)}</p>')
            elif b.kind == "answer":
                first, _, rest = b.text.partition("\n")
                lines = "".join(f"<br>{esc(x)}" for x in rest.splitlines())
                out.append(f'<div class="answer"><b>{esc(first)}</b>{lines}</div>')
            elif b.kind == "table":
                head = "".join(f"<th>{esc(human_header(c))}</th>" for c in b.columns)
                body = "".join(
                    "<tr>" + "".join(f"<td>{esc(format_value(v))}</td>" for v in r) + "</tr>"
                    for r in b.rows
                )
                out.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
                           f"<tbody>{body}</tbody></table></div>")
            elif b.kind == "figure":
                assert b.path is not None
                if not b.path.is_file():  # a plot that could not be drawn: say so, go on
                    out.append(f"<p><i>{esc(b.text)}: {MISSING} (no figure)</i></p>")
                    continue
                data = base64.b64encode(b.path.read_bytes()).decode("ascii")
                out.append(
                    f'<figure><img alt="{esc(b.text)}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{esc(b.text)}</figcaption></figure>"
                )
        out.append("</body></html>")
        return "\n".join(out) + "\n"

    def write(self, out_dir: str | os.PathLike, name: str = "report") -> tuple[Path, Path]:
        """Write ``<name>.md`` and ``<name>.html`` into ``out_dir``; return their paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        md, page = out / f"{name}.md", out / f"{name}.html"
        atomic_write_text(md, self.to_markdown(out))
        atomic_write_text(page, self.to_html())
        return md, page

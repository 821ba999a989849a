"""Kubernetes objects (plain dicts) as multi-document YAML, with no YAML library at run time.

Every string is emitted as a JSON string, which is a valid YAML double-quoted scalar, so names
and values never need escaping rules of their own; a multi-line string that a literal block
keeps exactly (a ConfigMap's file) is written as one (``|``). Both the static Job
(:mod:`optimizer.reports.k8s`) and the live one (:mod:`optimizer.reports.k8s_resize`) are
written through it, so the two files follow one set of rules.
"""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) or value is None:
        return json.dumps(value)
    if isinstance(value, (dict, list)):
        # Only empty ones get here: the non-empty ones are blocks of their own.
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(str(value))


def _block_ok(text: str) -> bool:
    """A literal block (``|``) keeps ``text`` exactly: one final newline, no leading blank."""
    body = text[:-1]
    return (text.endswith("\n") and not body.endswith("\n") and body[:1] not in ("", " ")
            and all(c == "\n" or c.isprintable() for c in body)
            and not any(ln.endswith(" ") for ln in body.split("\n")))


def _emit(obj: Any, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            k = key if _PLAIN_KEY.fullmatch(key) else json.dumps(key)
            if isinstance(value, (dict, list)) and value:
                lines += [f"{pad}{k}:", *_emit(value, indent + 2)]
            elif isinstance(value, str) and "\n" in value and _block_ok(value):
                lines.append(f"{pad}{k}: |")
                lines += [f"{pad}  {ln}".rstrip() for ln in value[:-1].split("\n")]
            else:
                lines.append(f"{pad}{k}: {_scalar(value)}")
        return lines
    for item in obj:
        if isinstance(item, (dict, list)) and item:
            sub = _emit(item, indent + 2)
            lines += [f"{pad}- {sub[0][indent + 2:]}", *sub[1:]]
        else:
            lines.append(f"{pad}- {_scalar(item)}")
    return lines


def to_yaml(objects: list[dict[str, Any]], header: list[str] | None = None) -> str:
    """``objects`` as one multi-document YAML (``---`` between them) after ``header``."""
    docs = ["\n".join(_emit(o, 0)) for o in objects]
    return "\n".join([*(header or []), "\n---\n".join(docs)]) + "\n"


def comment_lines(text: str) -> list[str]:
    """``text`` as YAML comment lines, one per line of it."""
    return [f"# {t}".rstrip() for t in text.splitlines()]


__all__ = ["comment_lines", "to_yaml"]

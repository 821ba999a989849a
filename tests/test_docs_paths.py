"""What the docs name exists, and a module says what it holds: every file or folder path that
``ARCHITECTURE.md`` names in backticks is in the repository, and no module's opening paragraph
carries an issue number (history belongs to the commit messages)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("optimizer", "envs", "agents", "phases")


def _files() -> set[str]:
    inside = {str(p.relative_to(ROOT)) for part in PARTS + ("benchmarks", "tests", "examples",
                                                           "configs")
              for p in (ROOT / part).rglob("*") if "__pycache__" not in p.parts}
    return inside | {p.name for p in ROOT.iterdir() if p.is_file()}


def named_paths(text: str) -> list[str]:
    """Backticked tokens that look like a Python file or a folder (``a/b.py``, ``a/``)."""
    tokens = (t.rstrip(",") for t in re.findall(r"`([^`\s]+)`", text))
    return [t for t in tokens if re.fullmatch(r"[\w./-]+(\.py|/)", t)]


def missing_paths(text: str, files: set[str]) -> list[str]:
    """The named paths found neither from the repository's root nor from ``optimizer/``; a
    bare file name must be some file's name (the docs list siblings after a full path)."""
    names = {Path(f).name for f in files}
    folders = {f + "/" for f in files} | {Path(f).parent.name + "/" for f in files}
    out = []
    for t in named_paths(text):
        if "/" not in t.rstrip("/"):
            ok = t in names or t in folders
        else:
            ok = any(c.rstrip("/") in files for c in (t, "optimizer/" + t))
        if not ok:
            out.append(t)
    return out


def test_every_path_architecture_md_names_exists():
    missing = missing_paths((ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8"), _files())
    assert not missing, f"ARCHITECTURE.md names paths that are not there: {missing}"


def test_the_checker_finds_a_moved_path():
    files = {"optimizer/search/goodput/efficiency.py", "optimizer/search/choice.py"}
    assert missing_paths("`search/efficiency.py`, `search/choice.py`, `choice.py`", files) == \
        ["search/efficiency.py"]


def test_no_module_opens_with_an_issue_number():
    found = []
    for part in PARTS:
        for p in (ROOT / part).rglob("*.py"):
            text = p.read_text(encoding="utf-8")
            if text.startswith('"""'):
                opening = text[3:text.find('"""', 3)].split("\n\n")[0]
                if re.search(r"\bissues? \d+", opening):
                    found.append(str(p.relative_to(ROOT)))
    assert not found, f"modules whose opening paragraph names an issue: {found}"

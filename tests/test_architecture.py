"""The house stays one-way: imports are read with ``ast`` (nothing is imported) and checked
against the layering of ARCHITECTURE.md.

- The foundation (``optimizer.errors``, ``optimizer.config``, ``optimizer.allocation``,
  ``optimizer.atomic_files``, ``optimizer.gpu``) imports nothing of the project but itself.
- ``phases`` imports the foundation only; ``envs`` the foundation and ``phases``; ``agents`` the
  foundation and the public packages ``envs`` and ``phases`` (never their modules: agents see an
  environment through Gymnasium's API); the rest of ``optimizer`` (the orchestrator) anything.
- No import loop, counting imports inside functions too: a lazy import hides a loop from the
  interpreter, not from a reader.
- No module over 600 lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("phases", "envs", "agents", "optimizer")
FOUNDATION = frozenset(
    {"optimizer.errors", "optimizer.config", "optimizer.allocation", "optimizer.atomic_files",
     "optimizer.gpu"}
)
MAX_LINES = 600


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    written: str
    """The module the statement names (``envs`` in ``from envs import lockstep``)."""


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path) -> dict[str, Path]:
    return {
        _module_name(p, root): p
        for part in PARTS
        if (root / part).is_dir()
        for p in sorted((root / part).rglob("*.py"))
    }


def import_edges(root: Path) -> list[Edge]:
    """Every import of a project module by a project module, lazy ones included."""
    modules = project_modules(root)
    edges = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[tuple[str, str]] = []
            if isinstance(node, ast.Import):
                targets = [(a.name, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import f``, mod.
                targets = [
                    (f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, base)
                    for a in node.names
                ]
            for target, written in dict.fromkeys(targets):
                if target.split(".")[0] in PARTS and target != name:
                    edges.append(Edge(name, target, node.lineno, written))
    return edges


def _part(module: str) -> str:
    return "foundation" if module in FOUNDATION else module.split(".")[0]


def forbidden(edge: Edge) -> str | None:
    """Why an import breaks the layering, or None."""
    src, dst = _part(edge.source), _part(edge.target)
    if dst in ("foundation", src) or src == "optimizer":
        return None
    if src == "foundation":
        return "the foundation imports nothing of the project but itself"
    allowed = {"phases": set(), "envs": {"phases"}, "agents": {"envs", "phases"}}[src]
    if dst not in allowed:
        return f"{src} may not import {dst}"
    if src == "agents" and edge.written != dst:
        return f"agents use {dst} through its public package, not its module {edge.written}"
    return None


def import_cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _describe(edges: list[Edge], root: Path) -> str:
    modules = project_modules(root)
    return "\n".join(
        f"  {modules[e.source].relative_to(root)}:{e.line}: {e.source} -> {e.target}: {why}"
        for e in edges
        if (why := forbidden(e))
    )


def test_no_part_imports_upstream():
    bad = _describe(import_edges(ROOT), ROOT)
    assert not bad, "imports against the one-way layering (ARCHITECTURE.md):\n" + bad


def test_no_import_cycles():
    cycles = import_cycles(import_edges(ROOT))
    assert not cycles, "import loops: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_modules_are_short():
    long = {
        str(p.relative_to(ROOT)): n
        for p in project_modules(ROOT).values()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them along their concerns): {long}"


# The checks above must be able to fail: a small tree with each kind of fault.
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"envs/model.py": "from optimizer.training import run\n"}, "envs may not import optimizer"),
        ({"envs/model.py": "def f():\n    from agents import x\n"}, "envs may not import agents"),
        ({"phases/crbm.py": "import envs.model\n"}, "phases may not import envs"),
        ({"agents/ppo.py": "from envs.state import S\n"}, "through its public package"),
        ({"optimizer/config.py": "from optimizer.records import T\n"}, "the foundation"),
    ],
)
def test_checker_finds_forbidden_imports(tmp_path, files, expected):
    root = _tree(tmp_path, {"optimizer/records.py": "", "envs/state.py": "", **files})
    assert expected in _describe(import_edges(root), root)


def test_checker_allows_the_layering(tmp_path):
    root = _tree(
        tmp_path,
        {
            "optimizer/errors.py": "",
            "optimizer/pipeline.py": "from agents import train\nfrom envs.model import M\n",
            "agents/train.py": "from envs import CloudEnvironment\nfrom optimizer.errors import E\n",
            "envs/__init__.py": "from envs.model import M\n",
            "envs/model.py": "from phases import PhaseDetector\nfrom optimizer import errors\n",
            "phases/__init__.py": "",
        },
    )
    assert _describe(import_edges(root), root) == ""


def test_checker_finds_cycles_through_lazy_and_relative_imports(tmp_path):
    root = _tree(
        tmp_path,
        {
            "optimizer/a.py": "from . import b\n",
            "optimizer/b.py": "def f():\n    from optimizer.a import g\n",
            "optimizer/c.py": "from optimizer import a\n",
        },
    )
    assert import_cycles(import_edges(root)) == [["optimizer.a", "optimizer.b"]]

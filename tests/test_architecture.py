"""The house stays one-way: imports are read with ``ast`` (nothing is imported) and checked
against the layering of ARCHITECTURE.md.

Between the four parts:

- The foundation (``optimizer.foundation``) imports nothing of the project but itself.
- ``phases`` imports the foundation only; ``envs`` the foundation and ``phases``; ``agents`` the
  foundation and the public packages ``envs`` and ``phases`` (never their modules: agents see an
  environment through Gymnasium's API); ``optimizer`` (the orchestrator) anything.

Inside the orchestrator, between its rooms (:data:`ROOMS`):

- ``trials`` (one measured run) never imports ``search``, ``reports``, ``offline`` or the doors:
  a trial is measured the same whoever asked for it;
- ``search`` never imports ``reports``, ``offline`` or the doors: what is chosen does not depend
  on how it is shown; of the history it reads the one form (``history.run``), never a store's
  reader: the doors read ``--history`` specs and hand the runs over;
- ``reports`` read records: ``trials`` and the foundation, never ``search`` or ``offline``;
- ``offline`` reads records and renders pages: ``trials.records``, ``reports.render``, and the
  history of runs (``history``);
- ``history`` (runs read from Prometheus, MLflow, TensorBoard, logs and traces into one form)
  imports only itself: where a run came from is known there and nowhere else;
- ``commands`` and the two doors (``optimizer.cli``, ``optimizer.pipeline``) may import any room.

Inside ``phases``, the evaluation of autoscaling policies (``phases.evaluation``) is a room that
the rest of ``phases`` never imports.

- No import loop, counting imports inside functions too: a lazy import hides a loop from the
  interpreter, not from a reader; nor among the in-process probe's ``site/`` modules, which
  import each other by top-level name (and take no private name of each other).
- No module over 500 lines, no folder with more than 15 modules, and ``optimizer/``'s top level
  holds only the doors and its rooms.

Inside ``optimizer/search``, the pipeline is a typed port
(``optimizer.search.core.port.SearchPort``):

- no ``x._private`` of an object other than ``self``, ``cls`` or the module itself;
- no parameter named ``opt``, ``port`` or ``pipeline`` annotated ``Any``;
- no function over 60 lines, from its ``def`` to its last line;
- layers (:data:`SEARCH_LAYERS`, bottom first): what trials say, the fits and the choices among
  trials; the vocabulary every stage speaks (``optimizer.search.core``: the port, the state,
  proposals, stop rules, stages, the outcome); one round's planning; the stages (the closed
  loop, the stages after it); their order (``optimizer.search.stages``) and the port's
  implementation they are handed (``optimizer.search.trial_port``). No module imports one
  of a layer above its own, lazily or for types only, and every module of the search is in a
  layer.

The job (``optimizer.foundation.job.Job``) and the orchestrator are typed objects, read by
their fields: no ``getattr(x, "name")`` with a literal name in the search, the reports, the
commands or the pipeline but those :data:`GETATTR_ALLOWED` names with why, and nothing named
``opt``, ``opts``, ``job``, ``port`` or ``pipeline`` annotated ``Any`` anywhere in
``optimizer/``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("phases", "envs", "agents", "optimizer")
MAX_LINES = 500
MAX_MODULES = 15
DOORS = frozenset({"optimizer", "optimizer.__main__", "optimizer.cli", "optimizer.pipeline"})
ROOMS = ("foundation", "trials", "search", "offline", "reports", "commands", "history")
ROOM_MAY_IMPORT = {
    "trials": {"trials"},
    "search": {"trials", "search", "history.run"},
    "reports": {"trials", "reports"},
    "offline": {"trials.records", "reports.render", "offline", "history"},
    "history": {"history"},
}
"""Rooms of the orchestrator and what each may import besides the foundation and the libraries
(``phases``, ``envs``, ``agents``); ``commands`` and the doors may import anything."""


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


def path_siblings(modules: dict[str, Path]) -> dict[Path, dict[str, str]]:
    """Folder → {top-level name: module} for folders without ``__init__.py`` (the probe's
    ``site/``): Python loads their modules from ``sys.path`` by top-level name, so
    ``import _cloudopt_probe_state as state`` there imports the sibling module."""
    out: dict[Path, dict[str, str]] = {}
    for name, path in modules.items():
        if not (path.parent / "__init__.py").exists():
            out.setdefault(path.parent, {})[path.stem] = name
    return out


def import_edges(root: Path) -> list[Edge]:
    """Every import of a project module by a project module, lazy ones included (a module of
    a folder on ``sys.path`` importing a sibling by its top-level name too)."""
    modules = project_modules(root)
    siblings = path_siblings(modules)
    edges = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        near = siblings.get(path.parent, {})
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
                target = near.get(target.split(".")[0], target)
                if target.split(".")[0] in PARTS and target != name:
                    edges.append(Edge(name, target, node.lineno, written))
    return edges


def _part(module: str) -> str:
    if module == "optimizer.foundation" or module.startswith("optimizer.foundation."):
        return "foundation"
    return module.split(".")[0]


def _room(module: str) -> str:
    """``search`` for ``optimizer.search.stages``; the door's own name for a door."""
    if module in DOORS:
        return module
    return module.split(".")[1]


def _in(module: str, allowed: set[str]) -> bool:
    inner = module.split(".", 1)[1] if "." in module else ""
    return any(inner == a or inner.startswith(a + ".") for a in allowed)


def _orchestrator_rule(src: str, dst: str) -> str | None:
    room = _room(src)
    if room in DOORS or room == "commands" or not dst.startswith("optimizer"):
        return None
    if room not in ROOM_MAY_IMPORT:
        return None
    if not _in(dst, ROOM_MAY_IMPORT[room]):
        return f"optimizer.{room} may not import {dst}"
    return None


def forbidden(edge: Edge) -> str | None:
    """Why an import breaks the layering, or None."""
    src, dst = _part(edge.source), _part(edge.target)
    if src == "foundation" and dst != "foundation":
        return "the foundation imports nothing of the project but itself"
    if dst == "foundation":
        return None
    if src == "optimizer":
        return _orchestrator_rule(edge.source, edge.target)
    if src == dst:
        if (src == "phases" and edge.target.startswith("phases.evaluation")
                and not edge.source.startswith("phases.evaluation")):
            return "phases may not import its evaluation room (phases.evaluation)"
        return None
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


def test_folders_are_small():
    counts: dict[str, int] = {}
    for p in project_modules(ROOT).values():
        if p.name != "__init__.py" and "site" not in p.relative_to(ROOT).parts:
            key = str(p.parent.relative_to(ROOT))
            counts[key] = counts.get(key, 0) + 1
    big = {k: n for k, n in counts.items() if n > MAX_MODULES}
    assert not big, f"folders over {MAX_MODULES} modules (make a room of a concern): {big}"


def test_orchestrator_top_level_holds_doors_and_rooms():
    top = ROOT / "optimizer"
    modules = {p.stem for p in top.glob("*.py")}
    packages = {p.name for p in top.iterdir() if (p / "__init__.py").is_file()}
    assert modules <= {"__init__", "__main__", "cli", "pipeline"}, sorted(modules)
    assert packages <= set(ROOMS), sorted(packages - set(ROOMS))


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
        ({"envs/model.py": "from optimizer.trials.records import T\n"},
         "envs may not import optimizer"),
        ({"envs/model.py": "def f():\n    from agents import x\n"}, "envs may not import agents"),
        ({"phases/crbm.py": "import envs.model\n"}, "phases may not import envs"),
        ({"agents/ppo.py": "from envs.state import S\n"}, "through its public package"),
        ({"optimizer/foundation/config.py": "from optimizer.trials.records import T\n"},
         "the foundation"),
        ({"optimizer/trials/runner.py": "from optimizer.search.choice import best\n"},
         "optimizer.trials may not import optimizer.search.choice"),
        ({"optimizer/reports/run_report.py": "def f():\n    from optimizer.search import choice\n"},
         "optimizer.reports may not import optimizer.search.choice"),
        ({"optimizer/search/refine.py": "from optimizer.reports.render import Report\n"},
         "optimizer.search may not import optimizer.reports.render"),
        ({"optimizer/offline/logs.py": "from optimizer.trials.runner import run\n"},
         "optimizer.offline may not import optimizer.trials.runner"),
        ({"phases/detector.py": "from phases.evaluation.metrics import m\n"},
         "its evaluation room"),
    ],
)
def test_checker_finds_forbidden_imports(tmp_path, files, expected):
    stubs = ("optimizer/trials/records.py", "optimizer/trials/runner.py", "envs/state.py",
             "optimizer/search/choice.py", "optimizer/reports/render.py",
             "phases/evaluation/metrics.py")
    root = _tree(tmp_path, {**dict.fromkeys(stubs, ""), **files})
    assert expected in _describe(import_edges(root), root)


def test_checker_allows_the_layering(tmp_path):
    root = _tree(
        tmp_path,
        {
            "optimizer/foundation/errors.py": "",
            "optimizer/trials/records.py": "from optimizer.foundation.errors import E\n",
            "optimizer/search/refine.py": "from optimizer.trials.records import T\n",
            "optimizer/reports/render.py": "from optimizer.trials import records\n",
            "optimizer/offline/report.py": "from optimizer.reports.render import R\n",
            "optimizer/pipeline.py": "from agents import train\nfrom envs.model import M\n"
                                     "from optimizer.search.refine import r\n",
            "agents/train.py": "from envs import CloudEnvironment\n"
                               "from optimizer.foundation.errors import E\n",
            "envs/__init__.py": "from envs.model import M\n",
            "envs/model.py": "from phases import PhaseDetector\n"
                             "from optimizer.foundation import errors\n",
            "phases/__init__.py": "",
            "phases/evaluation/evaluate.py": "from phases import PhaseDetector\n",
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


SITE = ("optimizer", "trials", "probe", "site")


def sibling_private_names(folder: Path) -> list[str]:
    """``module:line: name`` for every private name a module of ``folder`` (one on
    ``sys.path``) takes from a sibling: ``from _sibling import _name`` or ``alias._name``."""
    stems = {p.stem for p in folder.glob("*.py")}
    out = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                   for a in n.names if a.name in stems}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in stems:
                out += [f"{path.name}:{node.lineno}: {a.name}" for a in node.names
                        if a.name.startswith("_")]
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in aliases and node.attr.startswith("_")
                  and not node.attr.startswith("__")):
                out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_probe_site_modules_share_one_module_and_no_private_names():
    """The in-process probe's modules (``site/``, imported by top-level name inside the user's
    process) meet in ``_cloudopt_probe_state``: the loop check sees their imports, and none
    takes a private name of another."""
    prefix = ".".join(SITE) + "."
    edges = {(e.source, e.target) for e in import_edges(ROOT)}
    assert {(prefix + "_cloudopt_probe", prefix + "_cloudopt_probe_state"),
            (prefix + "_cloudopt_probe_hooks", prefix + "_cloudopt_probe_state")} <= edges
    bad = sibling_private_names(ROOT.joinpath(*SITE))
    assert not bad, "private names taken across the probe's modules: " + ", ".join(bad)


def test_checker_sees_the_imports_of_a_folder_on_sys_path(tmp_path):
    site = "/".join(SITE)
    root = _tree(tmp_path, {f"{site}/_p.py": "import _p_hooks as more\nmore._x, more.y\n",
                            f"{site}/_p_hooks.py": "from _p import _guard, ok\n",
                            f"{site}/_p_load.py": "import os\n",
                            f"{site}/_p_grads.py": "def f():\n    import _p_load\n"})
    prefix = ".".join(SITE)
    assert import_cycles(import_edges(root)) == [[f"{prefix}._p", f"{prefix}._p_hooks"]]
    assert Edge(f"{prefix}._p_grads", f"{prefix}._p_load", 2, "_p_load") in import_edges(root)
    assert sibling_private_names(root.joinpath(*SITE)) == ["_p.py:2: more._x",
                                                          "_p_hooks.py:1: _guard"]


# Inside the search: the pipeline is reached through its typed port, by public names only.
SEARCH = ("optimizer", "search")
MAX_FUNCTION_LINES = 60
PORT_NAMES = frozenset({"opt", "port", "pipeline"})
"""Parameters that stand for the pipeline: never annotated ``Any`` (their type is the port)."""


def _search_modules(root: Path) -> list[Path]:
    return sorted(root.joinpath(*SEARCH).rglob("*.py"))


def _is_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value in ("Any", "typing.Any")
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Any")


def private_reaches(root: Path) -> list[str]:
    """``module:line: text`` for every ``x._name`` in the search whose ``x`` is not ``self``,
    ``cls`` or the module itself: a private name of another object is no interface."""
    out = []
    for path in _search_modules(root):
        own = path.stem
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", own):
                continue
            out.append((str(path.relative_to(root)), node.lineno, ast.unparse(node)))
    return [f"{rel}:{line}: {text}" for rel, line, text in sorted(out)]


def untyped_ports(root: Path) -> list[str]:
    """``module:line: function(parameter)`` for every parameter named like the pipeline
    (:data:`PORT_NAMES`) and annotated ``Any`` in the search."""
    out = []
    for path in _search_modules(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                if arg.arg in PORT_NAMES and _is_any(arg.annotation):
                    name = getattr(node, "name", "lambda")
                    out.append((str(path.relative_to(root)), node.lineno, f"{name}({arg.arg})"))
    return [f"{rel}:{line}: {text}" for rel, line, text in out]


def long_functions(root: Path, most: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``module:line function`` → lines, from ``def`` to the function's last line, for every
    function in the search longer than ``most``."""
    out = {}
    for path in _search_modules(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > most:
                    out[f"{path.relative_to(root)}:{node.lineno} {node.name}"] = n
    return out


def test_the_search_reaches_no_private_name_of_another_object():
    bad = private_reaches(ROOT)
    assert not bad, ("the search reaches private names of other objects (add what it needs to "
                     "optimizer/search/core/port.py's SearchPort, by a public name):\n  "
                     + "\n  ".join(bad))


def test_the_search_takes_the_pipeline_as_its_typed_port():
    bad = untyped_ports(ROOT)
    assert not bad, ("parameters standing for the pipeline typed Any (type them SearchPort, or "
                     "pass the values they need):\n  " + "\n  ".join(bad))


def test_functions_of_the_search_are_short():
    long = long_functions(ROOT)
    assert not long, (f"functions of the search over {MAX_FUNCTION_LINES} lines (split them: "
                      f"one step each): {long}")


def test_search_checkers_find_what_they_look_for(tmp_path):
    bad = ("from typing import Any\n\n\n"
           "def refine(opt: Any, pipeline: 'Any', port: SearchPort, x: Any):\n"
           "    opt._say('hi')\n"
           "    port._measure\n"
           "    self._fine, cls._fine, mod._fine = 1, 2, 3\n"
           "    return port.__class__\n")
    root = _tree(tmp_path, {"optimizer/search/mod.py": bad,
                            "optimizer/trials/other.py": "def f(opt: Any):\n    opt._x()\n"})
    assert private_reaches(root) == ["optimizer/search/mod.py:5: opt._say",
                                     "optimizer/search/mod.py:6: port._measure"]
    assert untyped_ports(root) == ["optimizer/search/mod.py:4: refine(opt)",
                                   "optimizer/search/mod.py:4: refine(pipeline)"]
    body = "".join(f"    x = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    _tree(tmp_path, {"optimizer/search/long.py": f"def fits():\n{body}\n\n"
                                                 f"def over():\n{body}    x = 0\n"})
    assert long_functions(root) == {"optimizer/search/long.py:63 over": MAX_FUNCTION_LINES + 1}


# Inside the search: layers, bottom first; nothing imports a layer above its own.
SEARCH_LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("measures", frozenset({"acquisition", "baseline", "budget", "calibrate", "choice",
                            "expected", "fit_measurements", "goodput", "job_setup", "live",
                            "memory_need", "plan_cache", "prior", "recommend", "workload_fit"})),
    ("vocabulary", frozenset({"core"})),
    ("planning", frozenset({"planning"})),
    ("stages", frozenset({"loop", "after_loop", "prior.confirm"})),
    ("composition", frozenset({"stages", "trial_port", ""})),
)
"""The search's layers, bottom first, each a set of module prefixes inside ``optimizer.search``
(``""``: the package itself); a module is in the layer of its longest matching prefix."""


def _in_search(module: str) -> bool:
    return module == ".".join(SEARCH) or module.startswith(".".join(SEARCH) + ".")


def search_layer(module: str) -> int | None:
    """The index in :data:`SEARCH_LAYERS` of a module of the search, or None: in no layer."""
    inner = module.removeprefix(".".join(SEARCH)).removeprefix(".")
    matches = [(len(p), i) for i, (_, prefixes) in enumerate(SEARCH_LAYERS) for p in prefixes
               if inner == p or (p and inner.startswith(p + "."))]
    return max(matches)[1] if matches else None


def search_arrows_up(root: Path) -> list[str]:
    """``path:line: source (layer) -> target (layer)`` for every import in the search of a
    module in a higher layer, then ``path: module`` for every module of the search in none."""
    modules = project_modules(root)
    out = []
    for e in import_edges(root):
        if not (_in_search(e.source) and _in_search(e.target)):
            continue
        src, dst = search_layer(e.source), search_layer(e.target)
        if src is not None and dst is not None and dst > src:
            out.append(f"{modules[e.source].relative_to(root)}:{e.line}: {e.source} "
                       f"({SEARCH_LAYERS[src][0]}) -> {e.target} ({SEARCH_LAYERS[dst][0]})")
    out += [f"{path.relative_to(root)}: {name} is in no layer" for name, path in modules.items()
            if _in_search(name) and search_layer(name) is None]
    return out


def test_the_search_imports_no_layer_above_its_own():
    bad = search_arrows_up(ROOT)
    assert not bad, ("imports against the search's layers (a shared type goes down to "
                     "optimizer/search/core/, a stage's order up to optimizer/search/stages.py; "
                     "a new module goes into a layer of SEARCH_LAYERS):\n  " + "\n  ".join(bad))


def test_search_layer_checker_finds_arrows_up(tmp_path):
    root = _tree(tmp_path, {
        "optimizer/search/__init__.py": "",
        "optimizer/search/choice.py": "def f():\n    from optimizer.search.core import state\n",
        "optimizer/search/core/state.py": "from optimizer.search.choice import same_setting\n",
        "optimizer/search/loop/rounds.py": "from optimizer.search.core.state import S\n"
                                           "from optimizer.search.stages import stages\n",
        "optimizer/search/stages.py": "from optimizer.search.loop import rounds\n",
        "optimizer/search/stray.py": "",
    })
    assert search_layer("optimizer.search") == len(SEARCH_LAYERS) - 1
    assert search_layer("optimizer.search.goodput.efficiency") == 0
    assert search_arrows_up(root) == [
        "optimizer/search/choice.py:2: optimizer.search.choice (measures) -> "
        "optimizer.search.core.state (vocabulary)",
        "optimizer/search/loop/rounds.py:2: optimizer.search.loop.rounds (stages) -> "
        "optimizer.search.stages (composition)",
        "optimizer/search/stray.py: optimizer.search.stray is in no layer"]


# The job and the orchestrator are typed objects: read by their fields, never guessed at.
GETATTR_ROOMS = (("optimizer", "search"), ("optimizer", "reports"), ("optimizer", "commands"),
                 ("optimizer", "pipeline.py"))
"""Where ``getattr(x, "name")`` would hide a field a typed object must have."""
GETATTR_ALLOWED = {
    ("optimizer/search/baseline.py", "running"):
        "an executor's run may be a generator, whose close() stops its running trials, or "
        "any other iterator, which has none",
    ("optimizer/reports/render.py", "value"):
        "a value to render may be a numpy scalar (third-party), whose ndim says so",
    ("optimizer/commands/phases.py", "args"):
        "an argparse namespace: the subcommands that share the helper lack the flag",
}
"""``(module, receiver)`` pairs allowed a ``getattr`` with a literal name, each with why."""
HANDLE_NAMES = frozenset({"opt", "opts", "job", "port", "pipeline"})
"""Names of the job and the orchestrator: never annotated ``Any``, anywhere in ``optimizer/``."""


def _modules_in(root: Path, parts: tuple[str, ...]) -> list[Path]:
    path = root.joinpath(*parts)
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


def getattr_literals(root: Path) -> list[tuple[str, str, str]]:
    """``(module, receiver, name)`` for every ``getattr(receiver, "name"[, default])`` in
    :data:`GETATTR_ROOMS`."""
    out = []
    for parts in GETATTR_ROOMS:
        for path in _modules_in(root, parts):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "getattr" and len(node.args) >= 2
                        and isinstance(node.args[1], ast.Constant)
                        and isinstance(node.args[1].value, str)):
                    out.append((path.relative_to(root).as_posix(), ast.unparse(node.args[0]),
                                node.args[1].value))
    return sorted(out)


def _mentions_any(annotation: ast.expr | None) -> bool:
    """``Any``, ``"Any"``, ``Any | None``, ``Optional[Any]``."""
    if annotation is None:
        return False
    if _is_any(annotation):
        return True
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return _mentions_any(ast.parse(annotation.value, mode="eval").body)
        except SyntaxError:
            return False
    if isinstance(annotation, ast.BinOp):
        return _mentions_any(annotation.left) or _mentions_any(annotation.right)
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) in (
            "Optional", "typing.Optional"):
        return _mentions_any(annotation.slice)
    return False


def untyped_handles(root: Path) -> list[str]:
    """``module:line: name`` for every parameter, field or attribute named like the job or
    the orchestrator (:data:`HANDLE_NAMES`) and annotated ``Any`` in ``optimizer/``."""
    out = []
    for path in sorted((root / "optimizer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            found: list[tuple[str, ast.expr | None]] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                found = [(x.arg, x.annotation) for x in
                         [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x]
            elif isinstance(node, ast.AnnAssign):
                target = node.target
                name = target.id if isinstance(target, ast.Name) else (
                    target.attr if isinstance(target, ast.Attribute) else "")
                found = [(name, node.annotation)]
            out += [f"{path.relative_to(root).as_posix()}:{node.lineno}: {name}"
                    for name, annotation in found
                    if name in HANDLE_NAMES and _mentions_any(annotation)]
    return out


def test_no_getattr_guesses_at_a_typed_object():
    found = getattr_literals(ROOT)
    bad = [f"{m}: getattr({r}, {n!r})" for m, r, n in found if (m, r) not in GETATTR_ALLOWED]
    assert not bad, ("getattr with a literal name on a typed object (read the field; a job's "
                     "setting is on optimizer.foundation.job.Job), or allow it with a reason "
                     "in GETATTR_ALLOWED:\n  " + "\n  ".join(bad))
    stale = sorted(set(GETATTR_ALLOWED) - {(m, r) for m, r, _ in found})
    assert not stale, f"GETATTR_ALLOWED entries that match nothing any more: {stale}"


def test_the_job_and_the_orchestrator_are_never_typed_any():
    bad = untyped_handles(ROOT)
    assert not bad, ("the job or the orchestrator typed Any (type them Job, SearchPort, "
                     "CloudResourceOptimizer, ...):\n  " + "\n  ".join(bad))


def test_typed_object_checkers_find_what_they_look_for(tmp_path):
    root = _tree(tmp_path, {
        "optimizer/search/mod.py": "def f(job, x):\n    return getattr(job.opts, 'lr_arg', None)"
                                   " or getattr(x, name) or getattr(x, 'y')\n",
        "optimizer/trials/runner.py": "def f(m):\n    return getattr(m, 'launcher', None)\n",
        "optimizer/pipeline.py": "class P:\n    job: 'Any | None' = None\n    ok: Any = None\n"
                                 "    def __init__(self, opts: Optional[Any], port: object):\n"
                                 "        self.pipeline: Any = None\n",
        "optimizer/reports/r.py": "def g(*, opt: Any, job: Job): pass\n",
        "optimizer/commands/c.py": "",
    })
    assert getattr_literals(root) == [("optimizer/search/mod.py", "job.opts", "lr_arg"),
                                      ("optimizer/search/mod.py", "x", "y")]
    assert untyped_handles(root) == ["optimizer/pipeline.py:2: job",
                                     "optimizer/pipeline.py:4: opts",
                                     "optimizer/pipeline.py:5: pipeline",
                                     "optimizer/reports/r.py:1: opt"]

"""How ``--launcher auto`` starts a script, and whether its data-parallel workers can be measured
here, read from the script's source with ``ast`` (nothing of it runs).

A script runs as it runs without a launcher, ``python script.py``, unless it cannot: it reads
``LOCAL_RANK``, ``RANK`` or ``WORLD_SIZE`` with no default outside any guard
(``int(os.environ["LOCAL_RANK"])`` at the top level), joins a process group from torchrun's
variables outside any guard, or wraps its model for data parallelism without joining a group
itself (:func:`launcher_requirement`). A read under ``if ddp:``, ``if "RANK" in os.environ``, a
short-circuit ``and``, a ``try`` or after an early ``return`` is guarded; a read with a default
(``os.environ.get("LOCAL_RANK", 0)``) needs nothing.

Data-parallel workers are a dimension of the search only where a 2-worker trial starts on this
machine's backend: a script whose distributed path asks for NCCL (``backend="nccl"``, directly or
through a variable or attribute set to it) or puts each rank on ``cuda:{LOCAL_RANK}`` cannot start
one without CUDA (:func:`backend_blocker`), and is measured single-process; one that chooses by
availability (``"nccl" if torch.cuda.is_available() else "gloo"``) can.
:func:`decide_launch` puts the two together; :func:`backend_error` reads the same kind of failure
from a trial that nevertheless ran into it.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from optimizer.foundation.errors import CloudoptError
from optimizer.trials.launchers.torchrun import looks_distributed

RANK_VARS = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})
"""The variables torchrun gives each rank that a script reads to find its place."""
_WRAPPERS = frozenset({"DistributedDataParallel", "FullyShardedDataParallel", "fully_shard"})
_AVAILABILITY = frozenset({"is_available", "device_count"})
_EXITS = frozenset({"exit", "quit", "_exit"})


@dataclass(frozen=True)
class LaunchDecision:
    """How trials start the script and whether its data-parallel workers are measured."""

    launcher: str
    """``python`` or ``torchrun``."""
    workers: bool
    """Whether trials of 2 or more data-parallel workers are run (torchrun only)."""
    note: str | None = None
    """One line for the report where the script is measured single-process against what was
    asked or what it is written for (None otherwise)."""
    required: bool = False
    """The script cannot run without torchrun: a 1-worker trial runs under it too. Otherwise a
    1-worker trial runs as plain python, as its users run it (torchrun's launcher and
    rendezvous cost torchvision_ref's 13 s job 2 to 3 s more)."""


def cuda_available() -> bool:
    """Whether torch sees a CUDA device here (False where torch or its driver is broken: a
    CPU-only optimization must not stop on it)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def decide_launch(asked: str | None, source: str, cuda: bool | None = None) -> LaunchDecision:
    """The launcher and the workers for ``asked`` (``auto``/None, ``python``, ``torchrun``).

    ``auto``: torchrun where the script cannot run without it, or where it joins a process
    group that starts here (its workers are then measured); else python. A distributed path
    that cannot start here is measured single-process, even when torchrun is asked: as plain
    python, unless the script cannot run without torchrun (then one torchrun worker). ``cuda``
    defaults to what torch sees."""
    if asked not in (None, "auto", "python", "torchrun"):
        raise CloudoptError(f"--launcher {asked!r}: give auto, python or torchrun")
    if asked == "python":
        return LaunchDecision("python", False)
    try:
        need, blocker, joins = _read(source)
    except SyntaxError:  # the script scan reports it; here the old rule is the best guess
        joins = looks_distributed(source)
        return LaunchDecision("torchrun" if asked == "torchrun" or joins else "python", joins)
    block = None if (cuda_available() if cuda is None else cuda) else blocker
    if block is not None and (asked == "torchrun" or need or joins):
        if need:
            return LaunchDecision("torchrun", False, f"measured with 1 torchrun worker: {block} "
                                  "and this machine has no CUDA, so 2 workers would not start",
                                  required=True)
        return LaunchDecision("python", False, f"measured single-process (python, 1 worker): "
                              f"{block} and this machine has no CUDA, so 2 workers would not "
                              "start")
    if asked == "torchrun" or need or joins:
        return LaunchDecision("torchrun", True, required=bool(need))
    return LaunchDecision("python", False)


@functools.lru_cache(maxsize=8)
def _read(source: str) -> tuple[str | None, str | None, bool]:
    """What the rules read from a source, once per source (the command line and the pipeline
    both decide): the launcher requirement, the backend blocker, whether it joins a group."""
    tree = ast.parse(source)
    return launcher_requirement(tree), backend_blocker(tree), _joins_group(tree)


# ----------------------------------------------------------------------------------------------
# The script's guards: every node with the tests that must hold for it to run
# ----------------------------------------------------------------------------------------------

_TRY = ast.Constant("try")
"""Stands for an enclosing ``try`` with handlers: a failure there is caught, so it is guarded."""


def _is_main_test(test: ast.AST) -> bool:
    """``if __name__ == "__main__"``: every script runs its body, so it guards nothing."""
    return isinstance(test, ast.Compare) and any(
        isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(test))


def _may_exit(body: list[ast.stmt]) -> bool:
    """Whether a block can leave before its end: a return, raise, break, continue or exit()
    in it or in one of its branches (``if "RANK" not in os.environ: return``)."""
    for s in body:
        if isinstance(s, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
            return True
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and \
                _name(s.value.func).split(".")[-1] in _EXITS:
            return True
        if isinstance(s, ast.If) and (_may_exit(s.body) or _may_exit(s.orelse)):
            return True
    return False


def _guarded_nodes(tree: ast.AST) -> Iterator[tuple[ast.AST, tuple[ast.AST, ...]]]:
    """Every node of ``tree`` with the tests that guard it: enclosing ``if``/``while`` and
    conditional expressions, the earlier operands of a boolean ``and``/``or``, an ``if`` that
    returns early before it, and ``try`` blocks with handlers (:data:`_TRY`)."""

    def expr(node: ast.AST, conds: tuple[ast.AST, ...]) -> Iterator:
        yield node, conds
        if isinstance(node, ast.IfExp):
            yield from expr(node.test, conds)
            yield from expr(node.body, (*conds, node.test))
            yield from expr(node.orelse, (*conds, node.test))
        elif isinstance(node, ast.BoolOp):
            for k, v in enumerate(node.values):
                yield from expr(v, (*conds, *node.values[:k]))
        else:
            for child in ast.iter_child_nodes(node):
                yield from (block(child, conds) if isinstance(child, ast.stmt)
                            else expr(child, conds))

    def block(stmt: ast.stmt, conds: tuple[ast.AST, ...]) -> Iterator:
        if isinstance(stmt, (ast.If, ast.While)):
            inner = conds if _is_main_test(stmt.test) else (*conds, stmt.test)
            yield stmt, conds
            yield from expr(stmt.test, conds)
            yield from stmts(stmt.body, inner)
            yield from stmts(stmt.orelse, inner)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield stmt, conds
            yield from stmts(stmt.body, (*conds, _TRY) if stmt.handlers else conds)
            for h in stmt.handlers:
                yield from stmts(h.body, conds)
            yield from stmts(stmt.orelse, conds)
            yield from stmts(stmt.finalbody, conds)
        else:  # a def, a loop, a with: its blocks in order, its expressions as they are
            yield stmt, conds
            for _, value in ast.iter_fields(stmt):
                items = value if isinstance(value, list) else [value]
                if items and all(isinstance(v, ast.stmt) for v in items):
                    yield from stmts(items, conds)
                    continue
                for v in items:
                    if isinstance(v, ast.AST):
                        yield from (block(v, conds) if isinstance(v, ast.stmt)
                                    else expr(v, conds))

    def stmts(body: list[ast.stmt], conds: tuple[ast.AST, ...]) -> Iterator:
        for s in body:
            yield from block(s, conds)
            if isinstance(s, ast.If) and not _is_main_test(s.test) and (
                    _may_exit(s.body) or _may_exit(s.orelse)):
                conds = (*conds, s.test)  # what follows runs only where the test let it

    yield from stmts(getattr(tree, "body", []), ())


# ----------------------------------------------------------------------------------------------
# Names, reads of the rank variables, and what flows from them
# ----------------------------------------------------------------------------------------------

def _name(node: ast.AST) -> str:
    """The dotted name of a Name or Attribute chain (``os.environ.get``), "" otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _rank_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in RANK_VARS


def _environ(node: ast.AST) -> bool:
    return _name(node).split(".")[-1] == "environ"


def _rank_read_without_default(node: ast.AST) -> bool:
    """``os.environ["RANK"]``, or ``int(os.environ.get("RANK"))`` / ``int(os.getenv("RANK"))``,
    which fail where the variable is unset."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return _environ(node.value) and _rank_key(node.slice)
    if isinstance(node, ast.Call) and _name(node.func) == "int" and len(node.args) == 1:
        inner = node.args[0]
        return (isinstance(inner, ast.Call) and len(inner.args) == 1 and not inner.keywords
                and _rank_key(inner.args[0])
                and (_name(inner.func).endswith("environ.get") or _name(inner.func).endswith(
                    "getenv")))
    return False


def _targets(node: ast.AST) -> list[str]:
    """The dotted names an assignment binds (tuple targets unpacked)."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for e in node.elts for n in _targets(e)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    name = _name(node)
    return [name] if name else []


def _assignments(tree: ast.AST) -> Iterator[tuple[list[str], ast.AST]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            yield [n for t in node.targets for n in _targets(t)], node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value:
            yield _targets(node.target), node.value


def _tainted(tree: ast.AST, seed: Callable[[ast.AST], bool]) -> set[str]:
    """Names assigned, directly or through other such names, from an expression with a node
    for which ``seed`` holds (``ddp = int(os.environ.get("RANK", -1)) != -1`` for a read of
    a rank variable)."""
    found: set[str] = set()
    pairs = list(_assignments(tree))
    grew = True
    while grew:
        grew = False
        for names, value in pairs:
            if set(names) <= found:
                continue
            if _mentions(value, seed, found):
                found.update(names)
                grew = True
    return found


def _mentions(node: ast.AST, seed: Callable[[ast.AST], bool], names: set[str]) -> bool:
    return any(seed(n) or (isinstance(n, (ast.Name, ast.Attribute)) and _name(n) in names)
               for n in ast.walk(node))


def _availability(node: ast.AST) -> bool:
    """``torch.cuda.is_available()``, ``torch.cuda.device_count()``."""
    return isinstance(node, ast.Call) and _name(node.func).split(".")[-1] in _AVAILABILITY


def _calls(tree: ast.AST, names: frozenset[str]) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and _name(n.func).split(".")[-1] in names]


def _joins_group(tree: ast.AST) -> bool:
    """Whether the script itself joins a process group or wraps its model for data
    parallelism (a library that does it for the script, as accelerate does, is not seen)."""
    return bool(_calls(tree, frozenset({"init_process_group"}) | _WRAPPERS))


# ----------------------------------------------------------------------------------------------
# The two rules
# ----------------------------------------------------------------------------------------------

def launcher_requirement(tree: ast.AST) -> str | None:
    """Why the script cannot run as ``python script.py`` (a launcher must give it its rank),
    or None where it can: an unguarded read of a rank variable with no default, an unguarded
    ``init_process_group`` that takes its rank from the environment (no ``init_method`` or
    ``store``), or an unguarded data-parallel wrap in a script that joins no group itself."""
    joins = bool(_calls(tree, frozenset({"init_process_group"})))
    for node, conds in _guarded_nodes(tree):
        if conds:
            continue
        line = getattr(node, "lineno", "?")
        if _rank_read_without_default(node):
            return f"it reads {ast.unparse(node)} with no default and no guard (line {line})"
        if not isinstance(node, ast.Call):
            continue
        called = _name(node.func).split(".")[-1]
        if called == "init_process_group" and len(node.args) < 2 and not any(
                k.arg in ("init_method", "store") for k in node.keywords):
            return (f"it joins a process group from torchrun's variables with no guard "
                    f"(line {line})")
        if called in _WRAPPERS and not joins:
            return f"it wraps its model in {called} with no guard (line {line})"
    return None


def backend_blocker(tree: ast.AST) -> str | None:
    """What in the script's distributed path needs CUDA, in words (None: nothing, or only
    where CUDA is available): ``init_process_group`` asked for NCCL, or a rank's device
    ``cuda:{LOCAL_RANK}``, outside a test of ``torch.cuda.is_available()``."""
    ranked = _tainted(tree, _rank_key)
    avail = _tainted(tree, _availability)
    consts = _constants(tree)

    def by_availability(conds: tuple[ast.AST, ...]) -> bool:
        return any(c is not _TRY and _mentions(c, _availability, avail) for c in conds)

    for node, conds in _guarded_nodes(tree):
        if not isinstance(node, (ast.Call, ast.JoinedStr, ast.BinOp)):
            continue
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Call) and _name(node.func).split(".")[-1] == "init_process_group":
            arg = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg == "backend"), None)
            if arg is not None and _resolve(arg, consts) == "nccl" and not by_availability(conds):
                return f"its init_process_group asks for NCCL (line {line})"
            continue
        on_path = any(c is not _TRY and _mentions(c, _rank_key, ranked) for c in conds)
        if _rank_device(node, ranked, on_path) and not by_availability(conds):
            return f"it puts each rank on its own CUDA device (line {line})"
    return None


def _constants(tree: ast.AST) -> dict[str, str | None]:
    """Each name assigned string constants only, to that string where it is always the same
    (``backend = "nccl"``, ``args.dist_backend = "nccl"``); None where it varies."""
    out: dict[str, str | None] = {}
    for names, value in _assignments(tree):
        for n in names:
            s = value.value if isinstance(value, ast.Constant) and isinstance(
                value.value, str) else None
            out[n] = s if out.get(n, s) == s else None
    return out


def _resolve(node: ast.AST, consts: dict[str, str | None]) -> str | None:
    """A backend's string, lower-cased, where the source fixes it (None where it does not)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.lower()
    if isinstance(node, ast.IfExp):  # both branches the same: no choice was made
        a, b = _resolve(node.body, consts), _resolve(node.orelse, consts)
        return a if a == b else None
    value = consts.get(_name(node)) if _name(node) else None
    return value.lower() if value else None


def _rank_device(node: ast.AST, ranked: set[str], on_path: bool) -> bool:
    """``f"cuda:{local_rank}"``, ``"cuda:" + str(rank)``, ``"cuda:%d" % rank`` or
    ``torch.cuda.set_device(...)``, on the distributed path (formatted from a rank, or under a
    test of one)."""
    def cuda_text(n: ast.AST) -> bool:
        return isinstance(n, ast.Constant) and isinstance(n.value, str) and \
            n.value.lower().startswith("cuda:")

    if isinstance(node, ast.JoinedStr):
        hit = bool(node.values) and cuda_text(node.values[0]) and any(
            isinstance(v, ast.FormattedValue) for v in node.values)
    elif isinstance(node, ast.BinOp):
        hit = isinstance(node.op, (ast.Add, ast.Mod)) and cuda_text(node.left)
    else:
        hit = _name(node.func).endswith("cuda.set_device")
    return hit and (on_path or _mentions(node, _rank_key, ranked))


# ----------------------------------------------------------------------------------------------
# The same failure, read from a trial that ran into it
# ----------------------------------------------------------------------------------------------

_BACKEND_ERRORS = re.compile(
    r"Distributed package doesn't have \w+ built in|ProcessGroupNCCL|NCCL (?:error|Error|"
    r"is not available)|Torch not compiled with CUDA enabled|no CUDA GPUs are available|"
    r"Found no NVIDIA driver|CUDA driver initialization failed|invalid device ordinal")


def backend_error(stderr: str) -> str | None:
    """The line of ``stderr`` that says a process group or device could not start on this
    machine's backend (``RuntimeError: Distributed package doesn't have NCCL built in``), or
    None."""
    for line in reversed((stderr or "").splitlines()):
        if _BACKEND_ERRORS.search(line):
            return line.strip()
    return None


__all__ = ["LaunchDecision", "backend_blocker", "backend_error", "cuda_available",
           "decide_launch", "launcher_requirement"]

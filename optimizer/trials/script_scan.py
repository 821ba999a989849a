"""Static analysis of a user's training script: what its source says, without running it.

- :func:`load_script` reads and compiles the script (a missing file or a syntax error is a
  :class:`~optimizer.foundation.errors.TrainingScriptError` naming the file and line) and finds its entry:
  a ``__main__`` block, else a function ``train``, ``train_model`` or ``main``, else its
  top-level code.
- :func:`analyze_source` scans the syntax tree for GPU use, the model family, dataset hints,
  the layers and, when layer sizes are literals, the parameter count, and whether the script
  reads ``OPTIMIZER_BATCH_SIZE`` or writes ``OPTIMIZER_METRICS_CSV``.
- :func:`flag_default` and :func:`env_default` read the batch size a script uses when it is
  not told one: an argparse or click default, or the fallback of an environment variable.
- :func:`batch_knobs` lists the flags and environment variables through which a script seems
  to take its batch size, so that a user who gave neither is told which one to give.

Everything here works on the source alone; running the script is :mod:`optimizer.trials.runner`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.errors import TrainingScriptError

ENTRY_NAMES = ("train", "train_model", "main")


@dataclass
class ScriptInfo:
    """A training script read and compiled, not executed."""

    path: Path
    source: str
    tree: ast.Module
    has_main_guard: bool
    entry: str | None
    """``__main__`` (run as a script), a function name, or None (top-level code)."""


def load_script(path: Path) -> ScriptInfo:
    """Read and compile the script at ``path`` without running it, and find its entry point.

    Raises
    ------
    TrainingScriptError
        Missing or unreadable file, or a syntax error (message names file and line).
    """
    if not path.is_file():
        raise TrainingScriptError(f"{path}: training script not found")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainingScriptError(f"{path}: cannot read training script ({exc})") from None
    try:
        tree = ast.parse(source, filename=str(path))
        # ast.parse accepts some code that only the compiler rejects (e.g. `return` at top level).
        compile(tree, str(path), "exec")
    except SyntaxError as exc:
        raise TrainingScriptError(
            f"{path}:{exc.lineno}: syntax error in training script: {exc.msg}") from None
    guard = any(_is_main_guard(n) for n in tree.body)
    funcs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    entry = "__main__" if guard else next((e for e in ENTRY_NAMES if e in funcs), None)
    if entry not in (None, "__main__") and _calls_at_top_level(tree, entry):
        entry = "__main__"  # its own top-level code calls it: that code is the program
    return ScriptInfo(path, source, tree, guard, entry)


def _calls_at_top_level(tree: ast.Module, name: str) -> bool:
    """Whether code at the module's top level (not inside a function or class) calls
    ``name``, as a script without a ``__main__`` guard that trains at import does."""
    def visit(node: ast.AST) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == name:
            return True
        return any(visit(child) for child in ast.iter_child_nodes(node))
    return any(visit(n) for n in tree.body)


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    return (any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts)
            and any(isinstance(p, ast.Constant) and p.value == "__main__" for p in parts))


_FAMILIES = (  # first match wins: specific families before generic ones
    ("ResNet", ("resnet", "wide_resnet", "resnext")),
    ("VGG", ("vgg",)),
    ("EfficientNet", ("efficientnet",)),
    ("MobileNet", ("mobilenet",)),
    ("transformer", ("transformer", "multiheadattention", "bert", "gpt", "vit_", "attention")),
    ("RNN", ("lstm", "gru", "rnn")),
    ("autoencoder", ("autoencoder", "decoder")),
    ("CNN", ("conv1d", "conv2d", "conv3d")),
    ("MLP", ("linear",)),
)
_DATASETS = (
    ("CIFAR-100", ("cifar100",)), ("CIFAR-10", ("cifar10", "cifar")),
    ("ImageNet", ("imagenet",)), ("Fashion-MNIST", ("fashionmnist", "fashion_mnist")),
    ("MNIST", ("mnist",)), ("IMDB", ("imdb",)), ("COCO", ("coco",)),
    ("WikiText", ("wikitext",)), ("SQuAD", ("squad",)),
)
_SYNTHETIC_MARKERS = ("randn", "rand", "randint", "make_classification")
_GPU_MARKERS = ("cuda", "dataparallel", "distributeddataparallel", "nccl")


def _identifiers(tree: ast.AST) -> list[str]:
    """Lower-cased names, attribute names and string constants of a syntax tree."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.append(node.id.lower())
        elif isinstance(node, ast.Attribute):
            out.append(node.attr.lower())
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(node.name.lower())
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value.lower())
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.extend(a.name.lower() for a in node.names)
    return out


def _layer_params(node: ast.Call) -> tuple[str, int | None] | None:
    """(layer kind, parameter count or None when its sizes are not literals)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name not in ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding"):
        return None
    ints = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
    kernel: Any = None
    if name.startswith("Conv"):
        kw = {k.arg: k.value for k in node.keywords}
        knode = node.args[2] if len(node.args) > 2 else kw.get("kernel_size")
        if isinstance(knode, ast.Constant) and isinstance(knode.value, int):
            kernel = knode.value ** int(name[-2])
        elif isinstance(knode, ast.Tuple) and all(isinstance(e, ast.Constant) for e in knode.elts):
            kernel = int(np.prod([e.value for e in knode.elts]))
        if len(ints) < 2 or kernel is None:
            return name, None
        return name, ints[0] * ints[1] * kernel + ints[1]
    if len(ints) < 2:
        return name, None
    if name == "Embedding":
        return name, ints[0] * ints[1]
    return name, ints[0] * ints[1] + ints[1]


def analyze_source(tree: ast.Module) -> dict[str, Any]:
    """GPU use, model family, dataset hint, layers and literal parameter count of a script."""
    ids = _identifiers(tree)
    text = " ".join(ids)
    family = next((fam for fam, keys in _FAMILIES if any(k in text for k in keys)), None)
    dataset = next((ds for ds, keys in _DATASETS if any(k in text for k in keys)), None)
    if dataset is None and any(k in ids for k in _SYNTHETIC_MARKERS):
        dataset = "synthetic"
    layers = [p for p in (_layer_params(n) for n in ast.walk(tree) if isinstance(n, ast.Call)) if p]
    counts = [c for _, c in layers]
    return {
        "uses_gpu": any(m in ids for m in _GPU_MARKERS) or any("cuda" in i for i in ids),
        "model_family": family,
        "dataset": dataset,
        "layers": len(layers) or None,
        "params": sum(counts) if counts and all(c is not None for c in counts) else None,
        "reads_batch_size_env": "optimizer_batch_size" in ids,
        "writes_metrics_csv": "optimizer_metrics_csv" in ids,
        "framework": next((f for f in ("torch", "tensorflow", "jax", "sklearn") if f in ids), None),
    }


def _literal_int(node: ast.AST | None, minimum: int = 1) -> int | None:
    try:
        value = ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return (value if isinstance(value, int) and not isinstance(value, bool) and value >= minimum
            else None)


def flag_default(tree: ast.Module, flag: str, minimum: int = 1) -> int | None:
    """The literal default of a command-line flag, read from the source and never run.

    Finds argparse's ``add_argument("--batch-size", ..., default=64)``, click's
    ``@click.option("--batch-size", default=64)`` (any call naming the flag among its string
    arguments with a ``default=`` keyword) and argparse's ``set_defaults(batch_size=64)``.
    ``flag`` may carry a value template (``--bs={}``); only its name counts. None when the
    default is not an integer literal of at least ``minimum`` (``None``, computed, or absent;
    ``minimum=0`` for a count of data-loader workers).
    """
    node = _default_node(tree, flag)
    return None if node is None else _literal_int(node, minimum)


def flag_float_default(tree: ast.Module, flag: str) -> float | None:
    """:func:`flag_default` for a positive number (a learning rate: ``default=3e-4``)."""
    node = _default_node(tree, flag)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool) and node.value > 0:
        return float(node.value)
    return None


def flag_number_default(tree: ast.Module, flag: str) -> int | float | None:
    """:func:`flag_default` keeping the literal's type: an ``int`` or a ``float`` above 0
    (an epoch count that may be fractional, ``default=3.0``)."""
    node = _default_node(tree, flag)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool) and node.value > 0:
        return node.value
    return None


def _default_node(tree: ast.Module, flag: str) -> ast.AST | None:
    name = flag.split("=", 1)[0].strip()
    if not name:
        return None
    dest = name.lstrip("-").replace("-", "_")
    found: ast.AST | None = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        method = _name(node.func)
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        names = [a.value for a in node.args if isinstance(a, ast.Constant)
                 and isinstance(a.value, str)]
        if name in names and "default" in kw:
            found = kw["default"]
            explicit_dest = kw.get("dest")
            if isinstance(explicit_dest, ast.Constant) and isinstance(explicit_dest.value, str):
                dest = explicit_dest.value
        elif method == "set_defaults" and dest in kw:
            return kw[dest]  # set_defaults overrides add_argument's default
    return found


def env_default(tree: ast.Module, variable: str) -> int | None:
    """The literal fallback of ``os.environ.get(VARIABLE, "64")`` / ``os.getenv(VARIABLE, 64)``
    (the value a script uses when the variable is unset), or None."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == variable):
            value = _literal_int(node.args[1])
            if value is not None:
                return value
    return None


def _name(node: ast.AST | None) -> str:
    """``x`` of ``x`` or ``a.b.x`` (a called function, an attribute's owner), else ``""``."""
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _env_read(node: ast.AST) -> str | None:
    """The variable a node reads from the environment: ``os.environ.get("X")``,
    ``os.getenv("X")``, ``environ.get("X")`` or ``os.environ["X"]``."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name, owner = _name(node.func), _name(getattr(node.func, "value", None))
        if name == "getenv" or (name == "get" and owner == "environ"):
            value = node.args[0].value
            return value if isinstance(value, str) else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        if _name(node.value) == "environ" and isinstance(node.slice.value, str):
            return node.slice.value
    return None


def _flag_dest(call: ast.Call) -> tuple[str | None, str | None]:
    """An ``add_argument``/``click.option`` call's destination (``dest=``, else its first long
    flag with dashes as underscores) and the flag to name it by (its first long one)."""
    names = [a.value for a in call.args if isinstance(a, ast.Constant)
             and isinstance(a.value, str) and a.value.startswith("-")]
    flag = next((n for n in names if n.startswith("--")), names[0] if names else None)
    for kw in call.keywords:
        if kw.arg == "dest" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value), flag
    return (flag.lstrip("-").replace("-", "_") if flag else None), flag


def batch_knobs(tree: ast.Module) -> dict[str, list[str]]:
    """Flags (``add_argument``/``click.option`` names) and environment variables whose name
    mentions a batch size, in source order, then flags whose value is passed as a loader's
    ``batch_size=`` (``DataLoader(ds, batch_size=args.bs)``): ``{"flags": [...], "env":
    [...]}``. ``OPTIMIZER_BATCH_SIZE`` is left out: cloudopt sets it anyway."""
    flags: list[str] = []
    env: list[str] = []
    fed = {kw.value.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
           for kw in node.keywords
           if kw.arg == "batch_size" and isinstance(kw.value, ast.Attribute)}
    by_dest: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in ("add_argument", "option"):
            dest, flag = _flag_dest(node)
            if dest in fed and flag and flag not in by_dest:
                by_dest.append(flag)
    for node in ast.walk(tree):
        var = _env_read(node)
        if var and "batch" in var.lower() and var != "OPTIMIZER_BATCH_SIZE" and var not in env:
            env.append(var)
        if isinstance(node, ast.Call) and _name(node.func) in ("add_argument", "option"):
            for a in node.args:
                if (isinstance(a, ast.Constant) and isinstance(a.value, str)
                        and a.value.startswith("-") and "batch" in a.value.lower()
                        and a.value not in flags):
                    flags.append(a.value)
    flags += [f for f in by_dest if f not in flags]
    return {"flags": flags, "env": env}


EPOCH_FLAGS = ("--epochs", "--num-epochs", "--num_epochs", "--n-epochs", "--n_epochs",
               "--max-epochs", "--max_epochs", "--epoch", "--nepochs")


def epochs_of(tree: ast.Module, args: list[str] | tuple[str, ...] = ()) -> tuple[int, str] | None:
    """How many epochs a run makes, and where that came from: an epoch flag given in ``args``
    (``"--epochs 3"``), else that flag's literal default in the source (argparse or click,
    read by :func:`flag_default`). None when neither says, e.g. a loop over ``range(10)``: a
    completed run then counts its epochs itself."""
    given = list(args)
    for i, a in enumerate(given):
        name, _, value = a.partition("=")
        if name in EPOCH_FLAGS:
            if not value and i + 1 < len(given):
                value = given[i + 1]
            if value.strip().isdigit() and int(value) >= 1:
                return int(value), f"{name} in the script's arguments"
    for flag in EPOCH_FLAGS:
        default = flag_default(tree, flag)
        if default is not None:
            return default, f"the default of {flag} in the script's source"
    return None

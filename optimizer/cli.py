"""Command-line entry point: ``python -m optimizer`` and the ``cloudopt`` script.

``python -m optimizer --train-file model.py ...`` optimizes a training script; the subcommands
named in :data:`COMMANDS` live beside it (``python -m optimizer phases fit ...``). User errors
(:class:`~optimizer.foundation.errors.CloudoptError`) print one line and exit with status 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import signal
import sys
from collections.abc import Sequence

from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.install_check import foreign_packages

PROG = "python -m optimizer"
OPTIMIZE_MODULE = "optimizer.commands.optimize"
COMMANDS: dict[str, tuple[str, str]] = {
    "phases": ("optimizer.commands.phases", "discover workload phases in resource traces (CRBM)"),
    "autoscale": ("optimizer.commands.autoscale", "evaluate phase-based autoscaling policies"),
    "analyze": ("optimizer.commands.analyze", "predict resources for a job from training logs"),
    "run": ("optimizer.commands.run_plan", "run a job under a recorded live plan (per stage)"),
}


def available_commands() -> dict[str, str]:
    """Subcommands whose module is installed, with their one-line help."""
    return {name: text for name, (module, text) in COMMANDS.items()
            if importlib.util.find_spec(module) is not None}


def commands_epilog() -> str:
    lines = ["commands (run 'python -m optimizer COMMAND --help'):"]
    lines += [f"  {name:<10} {text}" for name, text in available_commands().items()]
    return "\n".join(lines)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every ``finally`` (trial teardown) runs."""


def _raise_terminated(signum, frame):  # noqa: ARG001 - the signal handler's signature
    raise Terminated()


FLAG_VALUED = ("--batch-size-arg", "--lr-arg", "--epochs-arg", "--workers-arg", "--train-args")
"""Options whose value is a flag of the user's script (or its arguments)."""


def join_flag_values(argv: list[str]) -> list[str]:
    """``--batch-size-arg --batch_size`` as ``--batch-size-arg=--batch_size``: argparse takes a
    value that starts with ``-`` for an option of its own, and these options' values always
    do."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in FLAG_VALUED and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the process's own entry point, not a caller's: SIGTERM is ours
        signal.signal(signal.SIGTERM, _raise_terminated)
    argv = join_flag_values(list(sys.argv[1:] if argv is None else argv))
    problems = foreign_packages()
    if problems:  # before any trial runs: a shadowed package would fail after them
        for line in problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    try:
        if argv and argv[0] in COMMANDS:
            module = importlib.import_module(COMMANDS[argv[0]][0])
            args = module.build_parser(f"{PROG} {argv[0]}").parse_args(argv[1:])
        else:
            module = importlib.import_module(OPTIMIZE_MODULE)
            args = module.build_parser(PROG).parse_args(argv)
        return int(module.run(args) or 0)
    except CloudoptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt as exc:
        print("terminated" if isinstance(exc, Terminated) else "interrupted", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

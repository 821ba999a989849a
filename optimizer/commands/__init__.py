"""Command-line commands. Each module has ``build_parser(prog)`` and ``run(args) -> int`` and
only parses arguments and calls library functions."""

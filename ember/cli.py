"""The `ember` command. Each subcommand is a small function over the Python API, in
its own module under `ember/cli_commands/`; this file assembles the parser and turns
an `EmberError` into a one-line message and exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ember.cli_commands import compile as compile_command
from ember.cli_commands import info as info_command
from ember.cli_commands import quantize as quantize_command
from ember.cli_commands import records as records_command
from ember.cli_commands import rpc as rpc_command
from ember.cli_commands import run as run_command
from ember.cli_commands import tasks as tasks_command
from ember.cli_commands import tune as tune_command
from ember.cli_commands.common import load_model, parse_shapes
from ember.errors import EmberError

__all__ = ["build_parser", "load_model", "main", "parse_shapes"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description="Ember deep-learning compiler")
    commands = parser.add_subparsers(dest="command", required=True)
    info_command.add_parser(commands)
    compile_command.add_parser(commands)
    run_command.add_parser(commands)
    quantize_command.add_parser(commands)
    records_command.add_parser(commands)
    tasks_command.add_parser(commands)
    tune_command.add_parser(commands)
    rpc_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except EmberError as error:
        print(f"ember: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""`ember tasks MODEL --target T`: the search tasks the auto-scheduler would tune, each
printed as `========== Task N (workload key: [...]) ==========` and its ComputeDAG,
with its FLOPs and weight (how many groups of the network share it)."""

from __future__ import annotations

import argparse
from typing import Any

from ember.cli_commands.common import add_model_arguments, format_count, load_model, parse_shapes
from ember.target import Target


def command_tasks(args: argparse.Namespace) -> int:
    from ember.autoschedule.task import extract_tasks, format_task

    target = Target(args.target)
    graph, params = load_model(args.model, parse_shapes(args.shapes), args.batch_size, args.layout)
    tasks, weights = extract_tasks(graph, params, target, args.include_simple_tasks)
    for index, (task, weight) in enumerate(zip(tasks, weights, strict=True)):
        print(format_task(index, task, weight))
    total = sum(task.flop_count * weight for task, weight in zip(tasks, weights, strict=True))
    print(
        f"{len(tasks)} tasks from {sum(weights)} groups for target '{target}', "
        f"{format_count(total)} FLOPs in all"
    )
    return 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("tasks", help="list the search tasks of a model")
    add_model_arguments(parser)
    parser.add_argument(
        "--target", default="llvm", help="e.g. 'llvm', 'llvm -mcpu=znver4' (default llvm)"
    )
    parser.add_argument(
        "--include-simple-tasks",
        action="store_true",
        help="also list groups without a reduction (layout transposes, reshapes, ...)",
    )
    parser.set_defaults(run=command_tasks)

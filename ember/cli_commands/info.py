"""`ember info MODEL`: inputs, outputs, operators, parameters and FLOPs of an ONNX file
or a built-in workload, or of a compiled artifact (.tar) as `ember compile` wrote it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from ember.cli_commands.common import add_model_arguments, format_count, load_model, parse_shapes
from ember.graph.analysis import ModelSummary, summarize


def print_summary(summary: ModelSummary, console: Console) -> None:
    io = Table(title=f"{summary.name}: inputs and outputs", title_justify="left")
    for column in ("", "name", "shape", "dtype"):
        io.add_column(column)
    for kind, values in (("input", summary.inputs), ("output", summary.outputs)):
        for value in values:
            io.add_row(kind, value.name, str(list(value.shape)), value.dtype)
    console.print(io)
    console.print(
        f"nodes: {summary.num_nodes}   params: {summary.num_params:,} "
        f"({summary.param_bytes / 2**20:.1f} MiB)"
    )
    ops = Table(title="operators (FLOPs = 2 x MACs for conv/dense/matmul)", title_justify="left")
    for column in ("op", "count", "MACs", "FLOPs", "share"):
        ops.add_column(column, justify="left" if column == "op" else "right")
    total = max(summary.total_flops, 1)
    for op in summary.ops:
        ops.add_row(
            op.op,
            str(op.count),
            format_count(op.macs) if op.macs else "-",
            format_count(op.flops),
            f"{100 * op.flops / total:.1f}%",
        )
    ops.add_section()
    ops.add_row(
        "total",
        str(summary.num_nodes),
        format_count(summary.total_macs),
        format_count(summary.total_flops),
        "100.0%",
    )
    console.print(ops)


def command_info(args: argparse.Namespace) -> int:
    from ember.cli_commands.artifact_info import is_artifact, print_artifact_info

    if is_artifact(args.model):
        return print_artifact_info(args.model, as_json=args.json)
    graph, _ = load_model(args.model, parse_shapes(args.shapes), args.batch_size, args.layout)
    summary = summarize(graph)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print_summary(summary, Console())
    return 0


def add_parser(commands: Any) -> None:
    info = commands.add_parser(
        "info",
        help="inputs, outputs, operators, parameters and FLOPs of a model or an artifact",
    )
    add_model_arguments(info)
    info.add_argument("--json", action="store_true", help="print machine-readable JSON")
    info.set_defaults(run=command_info)

"""The `ember` command. Each subcommand is a small function over the Python API."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ember.errors import EmberError
from ember.graph.analysis import ModelSummary, summarize
from ember.graph.ir import Graph, Params


def parse_shapes(text: str | None) -> dict[str, tuple[int, ...]] | None:
    """`"data:1,3,224,224;mask:1,16"` -> {"data": (1, 3, 224, 224), "mask": (1, 16)}."""
    if not text:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    # Empty items are skipped, so a trailing ';' is harmless.
    for item in filter(str.strip, text.split(";")):
        name, sep, dims = item.strip().rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise EmberError(
                f"cannot read --shapes entry {item!r}: write NAME:D1,D2,... and separate "
                "inputs with ';', e.g. --shapes 'input:1,3,224,224'"
            ) from None
    return shapes


def load_model(
    model: str,
    shapes: dict[str, tuple[int, ...]] | None = None,
    batch_size: int = 1,
    layout: str = "NCHW",
) -> tuple[Graph, Params]:
    """An ONNX file path or the name of a built-in workload (`resnet-50`, ...)."""
    from ember.frontend import from_onnx
    from ember.testing import get_workload, list_workloads

    if model in list_workloads():
        return get_workload(model, batch_size=batch_size, layout=layout)
    path = Path(model)
    if path.exists() or path.suffix == ".onnx":
        return from_onnx(path, shapes=shapes)
    raise EmberError(
        f"{model!r} is neither an existing model file nor a built-in workload; "
        f"built-in workloads: {', '.join(list_workloads())}"
    )


def _format_count(value: int) -> str:
    for unit, scale in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return str(value)


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
            _format_count(op.macs) if op.macs else "-",
            _format_count(op.flops),
            f"{100 * op.flops / total:.1f}%",
        )
    ops.add_section()
    ops.add_row(
        "total",
        str(summary.num_nodes),
        _format_count(summary.total_macs),
        _format_count(summary.total_flops),
        "100.0%",
    )
    console.print(ops)


def command_info(args: argparse.Namespace) -> int:
    graph, _ = load_model(args.model, parse_shapes(args.shapes), args.batch_size, args.layout)
    summary = summarize(graph)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print_summary(summary, Console())
    return 0


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx file or a built-in workload name (resnet-50, ...)")
    parser.add_argument(
        "--shapes",
        help="input shapes for models with symbolic dims, e.g. 'input:1,3,224,224;mask:1,16'",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="for built-in workloads")
    parser.add_argument(
        "--layout", default="NCHW", choices=("NCHW", "NHWC"), help="for built-in workloads"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description="Ember deep-learning compiler")
    commands = parser.add_subparsers(dest="command", required=True)
    info = commands.add_parser(
        "info", help="inputs, outputs, operators, parameters and FLOPs of a model"
    )
    _add_model_arguments(info)
    info.add_argument("--json", action="store_true", help="print machine-readable JSON")
    info.set_defaults(run=command_info)
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

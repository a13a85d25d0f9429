"""`ember compile MODEL --target T -o net.tar`: import a model (an ONNX file or a
built-in workload), build it with `ember.build` and export the artifact; with
--dump-code, also write every kernel's C source and loop IR and the AOT entry point's
C, so a user can read what was generated."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ember.cli_commands.common import (
    add_model_arguments,
    format_bytes,
    format_count,
    load_model,
    parse_shapes,
)
from ember.errors import UsageError
from ember.target import Target


def _tensors(entries: list[dict[str, Any]]) -> str:
    return ", ".join(f"{e['name']} {list(e['shape'])} {e['dtype']}" for e in entries)


def describe_library(metadata: Mapping[str, Any]) -> list[str]:
    """The lines `ember compile` prints about what it built, from the library's
    metadata (what becomes mod.json)."""
    graph = metadata.get("graph", {})
    plan = metadata.get("memory_plan", {})
    return [
        f"  inputs:  {_tensors(metadata['inputs'])}",
        f"  outputs: {_tensors(metadata['outputs'])}",
        f"  {graph.get('nodes', '?')} nodes -> {graph.get('optimized_nodes', '?')} after the "
        f"graph passes -> {graph.get('fused_groups', '?')} fused groups, "
        f"{graph.get('kernels', '?')} distinct kernels",
        f"  arena: {format_bytes(int(plan.get('arena_bytes', 0)))}   "
        f"FLOPs: {format_count(int(graph.get('total_flops', 0)))}",
    ]


def describe_schedules(metadata: Mapping[str, Any]) -> str:
    """Which kernels a tuning record scheduled and which fell back to the default."""
    kinds = {g["kernel"]: g.get("schedule") for g in metadata.get("groups", [])}
    tuned = sorted(k for k, kind in kinds.items() if kind == "tuned")
    default = sorted(k for k, kind in kinds.items() if kind == "default")
    text = f"  tuned schedules: {len(tuned)} of {len(tuned) + len(default)} kernels"
    if default:
        text += f"; default schedule (no valid record) for: {', '.join(default)}"
    return text


def dump_code(files: Mapping[str, str], directory: Path) -> None:
    """Write `files` (name -> text, from `Library.sources.files()`) into `directory`."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write --dump-code files to {directory}: {error}") from None


def command_compile(args: argparse.Namespace) -> int:
    import ember

    output = Path(args.output)
    if output.is_dir():
        raise UsageError(f"-o {str(output)!r} is a directory; give the artifact's file name")
    if not output.parent.is_dir():
        raise UsageError(f"-o {str(output)!r}: directory {str(output.parent)!r} does not exist")
    if args.tuning_records and not Path(args.tuning_records).is_file():
        raise UsageError(
            f"--tuning-records {args.tuning_records!r} does not exist; give the records file "
            "`ember tune -o` wrote, or leave the option out for the default schedules"
        )
    if args.dump_code and Path(args.dump_code).exists() and not Path(args.dump_code).is_dir():
        raise UsageError(f"--dump-code {args.dump_code!r} is a file; give a directory")
    target = Target(args.target)
    start = time.perf_counter()
    graph, params = load_model(args.model, parse_shapes(args.shapes), args.batch_size, args.layout)
    library = ember.build(graph, target, params=params, tuning_records=args.tuning_records)
    library.export_library(output)
    elapsed = time.perf_counter() - start
    print(f"compiled {args.model} for target '{target}' in {elapsed:.2f} s")
    for line in describe_library(library.metadata):
        print(line)
    if args.tuning_records:
        print(describe_schedules(library.metadata))
    if args.dump_code:
        files = library.sources.files()
        dump_code(files, Path(args.dump_code))
        print(f"  generated code: {len(files)} files in {args.dump_code}")
    print(f"  artifact: {output} ({format_bytes(output.stat().st_size)})")
    return 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("compile", help="compile a model into a deployable artifact")
    add_model_arguments(parser)
    parser.add_argument(
        "--target", default="llvm", help="e.g. 'llvm', 'llvm -mcpu=znver4' (default llvm)"
    )
    parser.add_argument("-o", "--output", default="module.tar", help="the artifact (.tar)")
    parser.add_argument(
        "--tuning-records", help="records from `ember tune`: the best schedule per task"
    )
    parser.add_argument(
        "--dump-code",
        metavar="DIR",
        help="write each kernel's C and loop IR and the AOT entry point's C into DIR",
    )
    parser.set_defaults(run=command_compile)

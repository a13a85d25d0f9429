"""`ember records distill -i log.json [-o out.json]` keeps the best valid record per
(workload, target), merged into the output; `ember records show log.json` prints per
task the best latency, GFLOPS, trials and errors by kind."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from ember.autoschedule.records import distill_file, load_records, summarize


def _latency(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def command_distill(args: argparse.Namespace) -> int:
    output, best = distill_file(args.input, args.output)
    print(f"wrote {len(best)} record(s), the best per task, to {output}")
    return 0


def command_show(args: argparse.Namespace) -> int:
    summaries = summarize(load_records(args.log))
    print(f"{args.log}: {len(summaries)} task(s)")
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("workload key", overflow="fold")
    table.add_column("target", overflow="fold")
    for column in ("best latency", "GFLOPS", "trials"):
        table.add_column(column, justify="right")
    table.add_column("errors")
    for index, summary in enumerate(summaries):
        table.add_row(
            str(index),
            summary.workload_key,
            summary.target,
            _latency(summary.best_seconds),
            f"{summary.gflops:.2f}" if summary.gflops is not None else "-",
            str(summary.trials),
            ", ".join(f"{kind.value} {count}" for kind, count in summary.errors) or "-",
        )
    Console().print(table)
    return 0


def add_parser(commands: Any) -> None:
    records = commands.add_parser("records", help="inspect and distill tuning records")
    actions = records.add_subparsers(dest="records_command", required=True)
    distill = actions.add_parser(
        "distill", help="keep the best valid record per task, merged into the output"
    )
    distill.add_argument("-i", "--input", required=True, help="records file to distill")
    distill.add_argument(
        "-o", "--output", help="output records file (default: INPUT with .best before the suffix)"
    )
    distill.set_defaults(run=command_distill)
    show = actions.add_parser("show", help="best latency, GFLOPS, trials and errors per task")
    show.add_argument("log", help="records file")
    show.set_defaults(run=command_show)

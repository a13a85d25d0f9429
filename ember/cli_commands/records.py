"""`ember records distill -i log.json [-o out.json]` keeps the best valid record per
(workload, target) of each compiler family that measured it, merged into the output;
`ember records show log.json` prints per task the best latency, GFLOPS, trials and
errors by kind; `ember records report a.json [b.json ...] -o report.html` writes an
HTML page (and a PNG) of the estimated end-to-end latency against trials, one curve
per log, and the per-task tables; `ember records train LOG [LOG ...] --model M
[--model M2 ...] -o cost_model.npz` trains the learned cost model on the records of
the models' tasks, for `ember tune --warm-start`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ember.autoschedule.records import distill_file, load_records, summarize
from ember.errors import UsageError


def _latency(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def command_distill(args: argparse.Namespace) -> int:
    output, best = distill_file(args.input, args.output)
    print(f"wrote {len(best)} record(s), the best per task and compiler family, to {output}")
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


def command_train(args: argparse.Namespace) -> int:
    from ember.autoschedule.task import extract_tasks
    from ember.autoschedule.xgb_model import XGBModel
    from ember.cli_commands.common import load_model, parse_shapes

    tasks = []
    for model in args.model:
        graph, params = load_model(model, parse_shapes(args.input_shapes))
        tasks += extract_tasks(graph, params, args.target, include_simple_tasks=True)[0]
    cost_model = XGBModel(seed=0, num_warmup_samples=1)
    try:
        used = sum(cost_model.update_from_file(log, tasks) for log in args.logs)
    finally:
        cost_model.close()
    if not cost_model.trained:
        raise UsageError(
            f"none of the records in {', '.join(args.logs)} is of a task of "
            f"{', '.join(args.model)} for target '{args.target}': give the models (and "
            "--target) the records were tuned for"
        )
    cost_model.save(args.output, trees_only=args.trees_only)
    recorded = {record.task.workload_key for log in args.logs for record in load_records(log)}
    keys = recorded & {task.workload_key for task in tasks}
    print(
        f"trained on {used} record(s) of {len(keys)} task(s); wrote {args.output} (use it "
        f"with: ember tune MODEL --warm-start {args.output})"
    )
    return 0


def command_report(args: argparse.Namespace) -> int:
    from ember.autoschedule import report

    labels = report.labels_for(args.logs)
    reports = [
        report.log_report(load_records(log), label)
        for log, label in zip(args.logs, labels, strict=True)
    ]
    html_path = report.write_html(reports, args.output)
    print(f"wrote {html_path}: {len(reports)} log(s)")
    for log_report in reports:
        curve = log_report.curve
        final = report.format_latency(curve.final)
        print(f"  {curve.label}: {curve.trials} records, {curve.tasks} tasks, estimate {final}")
    if args.no_png:
        return 0
    png = Path(args.png) if args.png else Path(args.output).with_suffix(".png")
    if report.write_png([r.curve for r in reports], png):
        print(f"wrote {png}")
    else:
        print("no PNG: matplotlib is not installed (pip install 'ember[report]')")
    return 0


def _add_report_parser(actions: Any) -> None:
    report = actions.add_parser(
        "report",
        help="HTML page (and PNG) of the estimated latency against trials, with per-task "
        "tables; several logs draw several curves",
    )
    report.add_argument("logs", nargs="+", metavar="LOG", help="records file(s)")
    report.add_argument("-o", "--output", default="report.html", help="the HTML page")
    report.add_argument(
        "--png", help="the chart as a PNG (default: the page's name with .png; needs matplotlib)"
    )
    report.add_argument("--no-png", action="store_true", help="write the HTML page only")
    report.set_defaults(run=command_report)


def add_parser(commands: Any) -> None:
    records = commands.add_parser("records", help="inspect and distill tuning records")
    actions = records.add_subparsers(dest="records_command", required=True)
    distill = actions.add_parser(
        "distill",
        help="keep the best valid record per task and compiler family, merged into the output",
    )
    distill.add_argument("-i", "--input", required=True, help="records file to distill")
    distill.add_argument(
        "-o", "--output", help="output records file (default: INPUT with .best before the suffix)"
    )
    distill.set_defaults(run=command_distill)
    show = actions.add_parser("show", help="best latency, GFLOPS, trials and errors per task")
    show.add_argument("log", help="records file")
    show.set_defaults(run=command_show)
    _add_report_parser(actions)
    train = actions.add_parser(
        "train", help="train the learned cost model on records, for ember tune --warm-start"
    )
    train.add_argument("logs", nargs="+", metavar="LOG", help="records file(s)")
    train.add_argument(
        "--model",
        action="append",
        required=True,
        help="a model (file or built-in workload) the records were tuned for; repeat for more",
    )
    train.add_argument("--target", default="llvm", help="the records' target (default llvm)")
    train.add_argument(
        "--input-shapes", help="input shapes the records were tuned with, as for ember tune"
    )
    train.add_argument("-o", "--output", required=True, help="the cost model file (.npz)")
    train.add_argument(
        "--trees-only",
        action="store_true",
        help="write the trained trees alone, not the records' features: all --warm-start "
        "reads, a much smaller file (how Ember's shipped pretrained models are written)",
    )
    train.set_defaults(run=command_train)

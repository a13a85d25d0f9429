"""`ember records report`: what a tuning run reached, as one self-contained HTML page.

    curves = [estimate_curve(load_records(path), label=path.name) for path in logs]
    write_html(curves, tables, "report.html")        # inline SVG chart + tables
    write_png(curves, "report.png")                  # False when matplotlib is missing

The chart is the estimated end-to-end latency against trials, replayed from the
records in file order: per (workload key, target) the best valid cost so far, the
estimate `sum(best * weight)` over the tasks of the log (the weight the task
scheduler wrote, 1 when absent), defined from the first trial at which every task has
a valid record. Several logs (a run with the learned cost model and one with the
random model) draw several curves on one chart: how an ablation is shown. The SVG is
generated here, so the page needs nothing but a browser; the PNG twin needs
matplotlib (`pip install 'ember[report]'`).
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ember.autoschedule.records import MeasureRecord, RecordsError, TaskRecordSummary, summarize

# Line colours, one per log (colour-blind-safe, Okabe and Ito's palette).
COLORS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
CHART_WIDTH, CHART_HEIGHT = 760, 420
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 80, 20, 20, 50
_TaskKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class EstimateCurve:
    """One log's estimated end-to-end latency (seconds) after each trial that changed
    it, plus the log's last trial; empty while some task has no valid record."""

    label: str
    points: tuple[tuple[int, float], ...]
    trials: int
    tasks: int

    @property
    def final(self) -> float | None:
        return self.points[-1][1] if self.points else None


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One row of a log's table: `ember records show`'s summary plus the weight."""

    summary: TaskRecordSummary
    weight: int


@dataclass(frozen=True, slots=True)
class LogReport:
    """What the page shows of one log."""

    curve: EstimateCurve
    rows: tuple[TaskRow, ...]


def task_weights(records: Iterable[MeasureRecord]) -> dict[_TaskKey, int]:
    """Each task of the log (first-seen order) and its weight: the first weight a
    record gives it, 1 when none does (a task tuned on its own)."""
    weights: dict[_TaskKey, int | None] = {}
    for record in records:
        key = (record.task.workload_key, record.task.target)
        if weights.get(key) is None:
            weights[key] = record.task.weight
    return {key: 1 if weight is None else weight for key, weight in weights.items()}


def estimate_curve(records: Sequence[MeasureRecord], label: str = "") -> EstimateCurve:
    """Replay `records` in order (see the module docstring)."""
    records = [record for record in records if record.is_trial]
    weights = task_weights(records)
    best: dict[_TaskKey, float] = {}
    points: list[tuple[int, float]] = []
    for trial, record in enumerate(records, start=1):
        key = (record.task.workload_key, record.task.target)
        if record.is_valid and record.median_cost < best.get(key, math.inf):
            best[key] = record.median_cost
        if len(best) < len(weights):
            continue
        estimate = sum(best[k] * weight for k, weight in weights.items())
        if not points or estimate != points[-1][1]:
            points.append((trial, estimate))
    if points and points[-1][0] < len(records):
        points.append((len(records), points[-1][1]))  # the line runs to the last trial
    return EstimateCurve(label, tuple(points), len(records), len(weights))


def log_report(records: Sequence[MeasureRecord], label: str) -> LogReport:
    weights = task_weights(records)
    rows = tuple(
        TaskRow(summary, weights[(summary.workload_key, summary.target)])
        for summary in summarize(records)
    )
    return LogReport(estimate_curve(records, label), rows)


def labels_for(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """File names as labels, or the paths as given where two names are the same."""
    names = [Path(path).name for path in paths]
    return [
        name if names.count(name) == 1 else str(path)
        for name, path in zip(names, paths, strict=True)
    ]


# -- the SVG chart ----------------------------------------------------------------------


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round tick values (1, 2 or 5 times a power of ten) covering
    [low, high]."""
    if not high > low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


def latency_unit(seconds: float) -> tuple[str, float]:
    """The unit to show latencies like `seconds` in and its scale."""
    return ("ms", 1e3) if seconds >= 1e-3 else ("us", 1e6)


def _tick_text(value: float) -> str:
    return f"{value:g}"


def svg_chart(curves: Sequence[EstimateCurve]) -> str:
    """The estimate curves as an inline SVG step chart with axes and a legend."""
    drawn = [curve for curve in curves if curve.points]
    width, height = CHART_WIDTH, CHART_HEIGHT
    header = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        'aria-label="estimated end-to-end latency against trials">'
    )
    if not drawn:
        message = "no estimate: in no log does every task have a valid record yet"
        return (
            f'{header}<text x="{width / 2}" y="{height / 2}" text-anchor="middle">'
            f"{message}</text></svg>"
        )
    values = [seconds for curve in drawn for _, seconds in curve.points]
    unit, scale = latency_unit(max(values))
    x_ticks = nice_ticks(0, max(curve.trials for curve in drawn))
    y_ticks = nice_ticks(min(values) * scale, max(values) * scale)
    plot = _Plot(x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1])
    parts = [header, _axes(plot, x_ticks, y_ticks, unit)]
    for index, curve in enumerate(curves):
        if curve.points:
            color = COLORS[index % len(COLORS)]
            parts.append(_polyline(plot, curve, scale, color))
    parts.append(_legend(curves))
    parts.append("</svg>")
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class _Plot:
    """Data ranges mapped onto the chart's plot area."""

    x_low: float
    x_high: float
    y_low: float
    y_high: float

    def x(self, value: float) -> float:
        span = CHART_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
        return MARGIN_LEFT + span * (value - self.x_low) / (self.x_high - self.x_low)

    def y(self, value: float) -> float:
        span = CHART_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
        return MARGIN_TOP + span * (self.y_high - value) / (self.y_high - self.y_low)


def _axes(plot: _Plot, x_ticks: Sequence[float], y_ticks: Sequence[float], unit: str) -> str:
    left, right = MARGIN_LEFT, CHART_WIDTH - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, CHART_HEIGHT - MARGIN_BOTTOM
    parts = ['<g class="axes" font-size="12" fill="#333">']
    for tick in y_ticks:
        y = plot.y(tick)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_tick_text(tick)}</text>'
        )
    for tick in x_ticks:
        x = plot.x(tick)
        parts.append(
            f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}" stroke="#333"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{bottom + 18}" text-anchor="middle">{_tick_text(tick)}</text>'
        )
    parts.append(
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" '
        'fill="none" stroke="#333"/>'
    )
    parts.append(
        f'<text x="{(left + right) / 2}" y="{CHART_HEIGHT - 10}" text-anchor="middle">trials</text>'
    )
    middle = (top + bottom) / 2
    parts.append(
        f'<text x="16" y="{middle}" text-anchor="middle" '
        f'transform="rotate(-90 16 {middle})">estimated latency ({unit})</text>'
    )
    parts.append("</g>")
    return "\n".join(parts)


def step_points(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """A best-so-far curve as the corners of its steps: the value holds until the
    trial that improved it."""
    corners: list[tuple[int, float]] = []
    for trial, value in points:
        if corners:
            corners.append((trial, corners[-1][1]))
        corners.append((trial, value))
    return corners


def _polyline(plot: _Plot, curve: EstimateCurve, scale: float, color: str) -> str:
    coordinates = " ".join(
        f"{plot.x(trial):.1f},{plot.y(value * scale):.1f}"
        for trial, value in step_points(curve.points)
    )
    title = html.escape(curve.label)
    return (
        f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coordinates}">'
        f"<title>{title}</title></polyline>"
    )


def _legend(curves: Sequence[EstimateCurve]) -> str:
    right = CHART_WIDTH - MARGIN_RIGHT - 10
    parts = ['<g class="legend" font-size="12">']
    for index, curve in enumerate(curves):
        y = MARGIN_TOP + 18 + 18 * index
        color = COLORS[index % len(COLORS)]
        label = html.escape(curve.label + ("" if curve.points else " (no estimate)"))
        parts.append(
            f'<line x1="{right - 24}" y1="{y - 4}" x2="{right}" y2="{y - 4}" '
            f'stroke="{color}" stroke-width="3"/>'
        )
        parts.append(f'<text x="{right - 30}" y="{y}" text-anchor="end">{label}</text>')
    parts.append("</g>")
    return "\n".join(parts)


# -- the page ---------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 70em; }
table { border-collapse: collapse; margin: 0.5em 0 2em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f3f3f3; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
td.key { font-family: monospace; font-size: 0.85em; word-break: break-all; }
p.note { color: #555; font-size: 0.9em; }
"""


def format_latency(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    unit, scale = latency_unit(seconds)
    return f"{seconds * scale:.3f} {unit}"


def _cell(text: str, kind: str = "") -> str:
    css = f' class="{kind}"' if kind else ""
    return f"<td{css}>{html.escape(text)}</td>"


def _table(report: LogReport) -> str:
    header = "".join(
        f"<th>{name}</th>"
        for name in ("#", "workload key", "target", "best latency", "GFLOPS", "trials", "errors")
    )
    rows = [f"<table>\n<tr>{header}<th>weight</th></tr>"]
    for index, row in enumerate(report.rows):
        summary = row.summary
        errors = ", ".join(f"{kind.value} {count}" for kind, count in summary.errors)
        gflops = f"{summary.gflops:.2f}" if summary.gflops is not None else "-"
        cells = (
            _cell(str(index), "number"),
            _cell(summary.workload_key, "key"),
            _cell(summary.target),
            _cell(format_latency(summary.best_seconds), "number"),
            _cell(gflops, "number"),
            _cell(str(summary.trials), "number"),
            _cell(errors or "-"),
            _cell(str(row.weight), "number"),
        )
        rows.append(f"<tr>{''.join(cells)}</tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _log_section(report: LogReport) -> str:
    curve = report.curve
    if curve.points:
        reached = (
            f"estimated end-to-end latency {format_latency(curve.final)}, defined from "
            f"trial {curve.points[0][0]} on"
        )
    else:
        reached = "no estimate yet: some task has no valid record"
    return (
        f"<h2>{html.escape(curve.label)}</h2>\n"
        f"<p>{curve.trials} records, {curve.tasks} tasks; {reached}.</p>\n{_table(report)}"
    )


def render_html(reports: Sequence[LogReport]) -> str:
    """The whole page: chart, then one table per log."""
    curves = [report.curve for report in reports]
    title = "Ember tuning report: " + ", ".join(curve.label for curve in curves)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            "<h2>Estimated end-to-end latency</h2>",
            svg_chart(curves),
            '<p class="note">After each trial (records in file order): the sum over the '
            "log's tasks of the best valid latency so far times the task's weight (how "
            "often it runs in the network; 1 when the log does not say). Defined once "
            "every task has a valid record.</p>",
            *(_log_section(report) for report in reports),
            "</body></html>",
            "",
        ]
    )


def write_html(reports: Sequence[LogReport], path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    try:
        path.write_text(render_html(reports), encoding="utf-8")
    except OSError as error:
        raise RecordsError(
            f"cannot write the report to {path}: {error.strerror}; choose a writable path with -o"
        ) from None
    return path


def write_png(curves: Sequence[EstimateCurve], path: str | os.PathLike[str]) -> bool:
    """The chart as a PNG through matplotlib; False (nothing written) when matplotlib
    is not installed, an optional extra: `pip install 'ember[report]'`."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return False
    # A Figure with its own Agg canvas: no pyplot, so no global backend or window.
    figure = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    drawn = [curve for curve in curves if curve.points]
    unit, scale = latency_unit(max((v for c in drawn for _, v in c.points), default=1.0))
    for index, curve in enumerate(curves):
        if curve.points:
            trials, values = zip(*curve.points, strict=True)
            axes.step(
                trials,
                [v * scale for v in values],
                where="post",
                color=COLORS[index % len(COLORS)],
                label=curve.label,
            )
    if not drawn:
        axes.text(0.5, 0.5, "no estimate yet", ha="center", transform=axes.transAxes)
    axes.set_xlabel("trials")
    axes.set_ylabel(f"estimated latency ({unit})")
    axes.grid(True, color="#dddddd")
    if drawn:
        axes.legend()
    try:
        figure.savefig(os.fspath(path))
    except OSError as error:
        raise RecordsError(
            f"cannot write the PNG to {path}: {error.strerror}; choose a writable --png"
        ) from None
    return True


__all__ = [
    "EstimateCurve",
    "LogReport",
    "TaskRow",
    "estimate_curve",
    "labels_for",
    "log_report",
    "nice_ticks",
    "render_html",
    "step_points",
    "svg_chart",
    "task_weights",
    "write_html",
    "write_png",
]

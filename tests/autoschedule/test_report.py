"""`ember records report`: the estimate curve replayed from a hand-made log (exact
numbers), the page's SVG chart and tables, several logs on one chart, and the PNG
when matplotlib is installed (a one-line note otherwise)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ember.autoschedule import ErrorKind, MeasureRecord, RecordResult, RecordTask, RecordToFile
from ember.autoschedule.report import (
    estimate_curve,
    labels_for,
    log_report,
    nice_ticks,
    render_html,
    step_points,
    svg_chart,
    task_weights,
)
from ember.cli import main

A, B = '["a", [4, 4]]', '["b", [8]]'


def record(
    key: str, seconds: float | None, weight: int | None = None, error: ErrorKind = ErrorKind.NONE
) -> MeasureRecord:
    costs = () if seconds is None else (seconds,)
    if seconds is None and error is ErrorKind.NONE:
        error = ErrorKind.RUNTIME
    task = RecordTask(key, "llvm", (), flops=2_000_000, weight=weight)
    return MeasureRecord(task, (), RecordResult(costs, error, timestamp=0.0))


# A runs twice in the network (the scheduler wrote weight 2, except on its first
# record); B's records carry no weight, so it counts once.
LOG = [
    record(A, 3e-3),  # 1: B has no valid record yet: no estimate
    record(B, None, error=ErrorKind.COMPILE),  # 2
    record(A, 2e-3, weight=2),  # 3
    record(B, 1e-3),  # 4: 2 * 2e-3 + 1e-3
    record(A, 5e-3, weight=2),  # 5: slower, no change
    record(B, 0.5e-3),  # 6: 2 * 2e-3 + 0.5e-3
    record(A, None, weight=2, error=ErrorKind.WRONG_ANSWER),  # 7
]


def test_weights_are_the_first_given_else_one() -> None:
    assert task_weights(LOG) == {(A, "llvm"): 2, (B, "llvm"): 1}


def test_estimate_curve_replays_best_so_far_times_weight() -> None:
    curve = estimate_curve(LOG, label="run")
    assert curve.points == ((4, 2 * 2e-3 + 1e-3), (6, 2 * 2e-3 + 0.5e-3), (7, 2 * 2e-3 + 0.5e-3))
    assert (curve.trials, curve.tasks, curve.final) == (7, 2, 2 * 2e-3 + 0.5e-3)


def test_estimate_is_undefined_while_a_task_has_no_valid_record() -> None:
    curve = estimate_curve([record(A, 1e-3), record(B, None)])
    assert curve.points == () and curve.final is None


def test_step_points_hold_each_value_until_the_next_trial() -> None:
    assert step_points([(4, 5.0), (6, 4.5), (7, 4.5)]) == [
        (4, 5.0), (6, 5.0), (6, 4.5), (7, 4.5), (7, 4.5),
    ]  # fmt: skip


def test_nice_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(0, 64) == [0, 20, 40, 60, 80]
    assert nice_ticks(4.5, 5.0) == [4.5, 4.6, 4.7, 4.8, 4.9, 5.0]
    assert nice_ticks(3.0, 3.0) == [3.0, 4.0, 5.0, 6.0]


def test_labels_are_file_names_unless_two_are_the_same() -> None:
    assert labels_for(["x/a.json", "y/b.json"]) == ["a.json", "b.json"]
    assert labels_for(["x/a.json", "y/a.json"]) == ["x/a.json", "y/a.json"]


def test_page_holds_the_svg_chart_and_the_task_table() -> None:
    page = render_html([log_report(LOG, "random <model>.json")])
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1
    assert "<polyline" in page and "estimated latency (ms)" in page
    assert "random &lt;model&gt;.json" in page and "<model>" not in page
    assert page.count("<tr>") == 3  # the header and one row per task
    # A: best 2 ms, 2 MFLOP / 2 ms = 1 GFLOPS, 4 trials, one wrong answer, weight 2.
    assert (
        '<td class="number">2.000 ms</td><td class="number">1.00</td>'
        '<td class="number">4</td><td>wrong_answer 1</td><td class="number">2</td>'
    ) in page
    assert "<td>compile 1</td>" in page
    assert "estimated end-to-end latency 4.500 ms, defined from trial 4 on" in page


def test_several_logs_draw_several_curves() -> None:
    other = [record(A, 1e-3), record(B, 1e-3)]
    chart = svg_chart([estimate_curve(LOG, "one"), estimate_curve(other, "two")])
    assert chart.count("<polyline") == 2
    assert ">one</text>" in chart and ">two</text>" in chart


def test_chart_without_any_estimate_says_so() -> None:
    chart = svg_chart([estimate_curve([record(A, None)], "broken")])
    assert "<polyline" not in chart and "no estimate" in chart


def _write_log(path: Path, records: list[MeasureRecord]) -> Path:
    RecordToFile(path).write(records)
    return path


def test_cli_report_writes_html_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _write_log(tmp_path / "xgb.json", LOG)
    second = _write_log(tmp_path / "random.json", [record(A, 4e-3), record(B, 2e-3)])
    page = tmp_path / "cmp.html"
    assert main(["records", "report", str(first), str(second), "-o", str(page)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {page}: 2 log(s)" in out
    assert "xgb.json: 7 records, 2 tasks, estimate 4.500 ms" in out
    assert "random.json: 2 records, 2 tasks, estimate 6.000 ms" in out
    text = page.read_text()
    assert text.count("<polyline") == 2 and text.count("<table>") == 2
    if importlib.util.find_spec("matplotlib") is None:
        assert "pip install 'ember[report]'" in out
        pytest.skip("matplotlib is not installed (pip install 'ember[report]'): no PNG")
    png = tmp_path / "cmp.png"
    assert f"wrote {png}" in out
    assert png.read_bytes().startswith(b"\x89PNG")


def test_cli_report_without_matplotlib_notes_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)
    log = _write_log(tmp_path / "log.json", LOG)
    assert main(["records", "report", str(log), "-o", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert "no PNG: matplotlib is not installed (pip install 'ember[report]')" in out
    assert (tmp_path / "r.html").is_file() and not (tmp_path / "r.png").exists()


def test_cli_report_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["records", "report", str(tmp_path / "absent.json")]) == 2
    assert "absent.json does not exist" in capsys.readouterr().err
    log = _write_log(tmp_path / "log.json", LOG)
    page = tmp_path / "no" / "page.html"
    assert main(["records", "report", str(log), "-o", str(page), "--no-png"]) == 2
    assert f"cannot write the report to {page}" in capsys.readouterr().err

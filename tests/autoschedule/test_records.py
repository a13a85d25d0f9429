"""Tuning records: JSON-lines round trip, a log damaged by a killed run still loads
(with one warning), load_best and distill use only valid records, and the
`ember records` commands with the messages of the errors a user can cause."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest

from ember import te
from ember.autoschedule import (
    ApplyHistoryBest,
    ErrorKind,
    MeasureRecord,
    RecordResult,
    RecordsError,
    RecordTask,
    RecordToFile,
    distill,
    load_best,
    load_records,
)
from ember.autoschedule.records import fastest_trials
from ember.cli import main
from ember.errors import EmberError
from ember.schedule import Annotation, AnnotationStep, ScheduleError, SplitStep, replay
from ember.target import Target


def dense_dag(m: int = 5, n: int = 6, k: int = 7) -> te.ComputeDAG:
    data = te.placeholder((m, k), name="data")
    weight = te.placeholder((n, k), name="weight")
    rk = te.reduce_axis(k, "k")
    dense = te.compute(
        (m, n), lambda i, j: te.reduce_sum(data[i, rk] * weight[j, rk], rk), name="T_dense"
    )
    return te.ComputeDAG([dense])


DENSE = 2  # stage of T_dense in dense_dag: after the data and weight placeholders
KEY = json.dumps(["abc123", [5, 7], [6, 7], [6], [5, 6]])
OTHER_KEY = json.dumps(["def456", [8, 8]])


def record(
    cost: float | None = 1e-3,
    error: ErrorKind = ErrorKind.NONE,
    key: str = KEY,
    target: str = "llvm",
    flops: int | None = 420,
) -> MeasureRecord:
    steps = (SplitStep(DENSE, 0, (5,)), AnnotationStep(DENSE, 0, Annotation.PARALLEL))
    costs = (cost, cost) if cost is not None else ()
    return MeasureRecord(
        RecordTask(key, target, (("cores", 4), ("vector_bytes", 32)), flops),
        steps,
        RecordResult(costs, error, "" if error is ErrorKind.NONE else "boom", 1.5),
    )


def write(path: Path, *records: MeasureRecord) -> Path:
    RecordToFile(path)(list(records))
    return path


def test_round_trip_through_a_file_replays_the_same_state(tmp_path: Path) -> None:
    original = record()
    log = write(tmp_path / "log.json", original, record(error=ErrorKind.TIMEOUT, cost=None))
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["version"] == 1 and first["task"]["hardware"] == {"cores": 4, "vector_bytes": 32}
    assert first["result"] == {
        "costs": [1e-3, 1e-3],
        "error": "none",
        "message": "",
        "timestamp": 1.5,
    }
    loaded = load_records(log)
    assert loaded[0] == original and loaded[1].result.error is ErrorKind.TIMEOUT
    dag = dense_dag()
    assert replay(dag, loaded[0].steps) == replay(dag, original.steps)


def test_records_note_the_compiler_and_older_records_load_without_it(tmp_path: Path) -> None:
    noted = dataclasses.replace(
        record(), result=dataclasses.replace(record().result, compiler="gcc 12")
    )
    log = write(tmp_path / "log.json", noted, record())
    first, second = (json.loads(line)["result"] for line in log.read_text().splitlines())
    assert first["compiler"] == "gcc 12" and "compiler" not in second
    assert [r.result.compiler for r in load_records(log)] == ["gcc 12", ""]
    broken = log.read_text().replace('"compiler":"gcc 12"', '"compiler":12')
    log.write_text(broken)
    with pytest.warns(UserWarning, match="skipped 1 damaged line"):
        load_records(log)


def noted(compiler: str, key: str = KEY) -> MeasureRecord:
    base = record(key=key)
    return dataclasses.replace(base, result=dataclasses.replace(base.result, compiler=compiler))


@pytest.mark.parametrize(
    ("tuned_with", "building_with", "warns"),
    [
        ("clang 19", "clang 19", False),
        ("gcc 12", "gcc 13", False),  # one family: versions were not compared
        ("gcc 12", "clang 19", True),
        ("clang 19", "gcc 12", True),
        ("", "gcc 12", False),  # no note: written when gcc was the default
        ("", "clang 19", True),
        ("gcc 12", "", False),  # no compiler here: the build itself says so
    ],
)
def test_records_of_another_compiler_family_warn_when_applied(
    tuned_with: str, building_with: str, warns: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schedule tuned with GCC ran 9-10% slower built by clang and the other way
    round: applying such records says so, naming what to build them with."""
    monkeypatch.setattr("ember.toolchain.compiler_identity", lambda target: building_with)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ApplyHistoryBest([noted(tuned_with)]).lookup(KEY, dense_dag(), Target("llvm"))
    assert len(caught) == int(warns)
    if warns:
        message = str(caught[0].message)
        assert f"this build compiles with {building_with}" in message
        assert ("no compiler note" if not tuned_with else f"measured with {tuned_with}") in message
        assert f"CC={'-'.join(tuned_with.split()) or 'gcc'} to build them as tuned" in message


def test_a_log_of_both_families_applies_the_best_of_the_building_compilers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gcc's best (1 ms) is faster than clang's (2 ms) in a log tuned with each: a
    clang build takes clang's, whose time was measured on clang's code, and says
    nothing; a build with a compiler no record was measured with takes the best of
    all, and warns."""
    fast_gcc = dataclasses.replace(noted("gcc 12"), steps=record().steps[:1])
    slow_clang = noted("clang 19")
    slow_clang = dataclasses.replace(
        slow_clang, result=dataclasses.replace(slow_clang.result, costs=(2e-3, 2e-3))
    )
    source, dag = ApplyHistoryBest([fast_gcc, slow_clang]), dense_dag()
    assert source.best(KEY, "llvm") is fast_gcc
    assert source.best(KEY, "llvm", "clang 18") is slow_clang
    assert source.best(KEY, "llvm", "gcc 13") is fast_gcc
    assert source.best(KEY, "llvm", "icx 2025") is fast_gcc
    for building_with, applied, warns in (
        ("clang 19", slow_clang, False),
        ("gcc 12", fast_gcc, False),
        ("icx 2025", fast_gcc, True),
    ):
        monkeypatch.setattr("ember.toolchain.compiler_identity", lambda t, c=building_with: c)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state = source.lookup(KEY, dag, Target("llvm"))
        assert state == replay(dag, applied.steps)
        assert len(caught) == int(warns)


def test_the_fastest_trials_of_one_compiler_family() -> None:
    gcc, clang = noted("gcc 12"), noted("clang 19")
    clang = dataclasses.replace(
        clang, steps=record().steps[:1], result=dataclasses.replace(clang.result, costs=(2e-3,))
    )
    assert fastest_trials([gcc, clang], [KEY], 3) == [[gcc, clang]]
    assert fastest_trials([gcc, clang], [KEY], 3, "clang 18") == [[clang]]
    assert fastest_trials([gcc, clang], [KEY], 3, "gcc 13") == [[gcc]]
    assert load_best([gcc, clang], KEY, "llvm", "clang 19") is clang
    assert load_best([gcc, clang], KEY, "llvm") is gcc


def test_the_warning_comes_once_per_target_and_not_for_records_that_do_not_apply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("ember.toolchain.compiler_identity", lambda target: "clang 19")
    cross = Target("llvm -mtriple=aarch64-linux-gnu")
    for_cross = noted("gcc 12", key=OTHER_KEY)
    for_cross = dataclasses.replace(
        for_cross, task=dataclasses.replace(for_cross.task, target=str(cross))
    )
    source = ApplyHistoryBest([noted("gcc 12"), for_cross])
    elementwise = te.compute((4,), lambda i: te.placeholder((4,), name="x")[i] * 2.0, name="y")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ScheduleError):  # the steps of another DAG: no schedule, no warning
            source.lookup(KEY, te.ComputeDAG([elementwise]), Target("llvm"))
        assert not caught
        source.lookup(KEY, dense_dag(), Target("llvm"))
        source.lookup(KEY, dense_dag(), Target("llvm"))
        source.lookup(OTHER_KEY, dense_dag(), cross)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2, messages  # once for each target
    assert "CC=gcc-12" in messages[0] and "put a gcc cross compiler first on PATH" in messages[1]


def test_damaged_lines_are_skipped_with_one_warning(tmp_path: Path) -> None:
    log = write(tmp_path / "log.json", record(), record(cost=2e-3))
    good = log.read_text()
    # garbage in the middle, and a last line cut short as by SIGKILL mid-write
    log.write_text(good + "not json at all\n" + record().to_line()[:40])
    with pytest.warns(UserWarning) as caught:
        loaded = load_records(log)
    assert len(caught) == 1
    assert str(log) in str(caught[0].message) and "skipped 2 damaged line" in str(caught[0].message)
    assert len(loaded) == 2
    # the next round starts on a fresh line, so it is not lost to the damaged one
    write(log, record(cost=5e-4))
    with pytest.warns(UserWarning, match="skipped 2"):
        assert load_records(log)[-1].median_cost == pytest.approx(5e-4)


def test_a_clean_log_loads_without_warnings(tmp_path: Path) -> None:
    log = write(tmp_path / "log.json", record())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_records(log)) == 1


def test_load_best_ignores_errors_and_other_tasks(tmp_path: Path) -> None:
    records = [
        record(cost=3e-3),
        record(cost=1e-9, error=ErrorKind.WRONG_ANSWER),
        record(cost=None, error=ErrorKind.RUNTIME),
        record(cost=2e-3),
        record(cost=1e-6, key=OTHER_KEY),
        record(cost=1e-6, target="cuda"),
    ]
    best = load_best(records, KEY, "llvm")
    assert best is not None and best.median_cost == pytest.approx(2e-3)
    log = write(tmp_path / "log.json", *records)
    assert load_best(log, KEY, "llvm") == best
    assert load_best(log, KEY, "c") is None
    assert load_best([record(error=ErrorKind.COMPILE)], KEY, "llvm") is None


def test_distill_keeps_the_best_valid_record_per_task() -> None:
    best = distill(
        [
            record(cost=3e-3),
            record(cost=1e-3),
            record(cost=1e-9, error=ErrorKind.TIMEOUT),
            record(cost=4e-3, key=OTHER_KEY),
        ]
    )
    assert [(r.task.workload_key, r.median_cost) for r in best] == [(KEY, 1e-3), (OTHER_KEY, 4e-3)]


def in_network(cost: float, key: str = KEY) -> MeasureRecord:
    """A time inside the network (`ember tune`'s end-of-run check)."""
    trial = record(cost, key=key)
    return dataclasses.replace(
        trial, result=dataclasses.replace(trial.result, costs=(cost,), in_network=True)
    )


def test_times_in_the_network_outrank_trials_until_a_later_trial(tmp_path: Path) -> None:
    """The default ran faster in the network (2e-3) than the best trial (1e-3 alone,
    3e-3 there): distill picks it. A trial after them (a resumed run) was not compared
    in the network, so the trials decide again."""
    checked = [record(cost=1e-3), in_network(3e-3), in_network(2e-3)]
    assert [(r.median_cost, r.is_trial) for r in distill(checked)] == [(2e-3, False)]
    assert distill([*checked, record(cost=5e-3)])[0].median_cost == 1e-3
    other = [record(cost=4e-3, key=OTHER_KEY)]
    assert [r.median_cost for r in distill([*checked, *other])] == [2e-3, 4e-3]
    # The flag survives a file, and only when set is it written.
    log = tmp_path / "log.json"
    RecordToFile(log).write(checked)
    assert [r.is_trial for r in load_records(log)] == [True, False, False]
    assert log.read_text().count('"in_network":true') == 2 and "false" not in log.read_text()
    line = json.loads(checked[1].to_line())
    line["result"]["in_network"] = "yes"
    with pytest.raises(RecordsError, match="in_network must be true or false"):
        MeasureRecord.from_json(line)


def test_cli_distill_merges_into_the_existing_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write(tmp_path / "log.json", record(cost=3e-3), record(cost=2e-3, key=OTHER_KEY))
    out = write(tmp_path / "out.json", record(cost=1e-3), record(cost=9e-3, target="cuda"))
    assert main(["records", "distill", "-i", str(log), "-o", str(out)]) == 0
    assert "wrote 3 record(s)" in capsys.readouterr().out
    merged = {(r.task.workload_key, r.task.target): r.median_cost for r in load_records(out)}
    assert merged == {(KEY, "llvm"): 1e-3, (KEY, "cuda"): 9e-3, (OTHER_KEY, "llvm"): 2e-3}


def test_cli_distill_keeps_the_best_of_each_compiler_family(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def measured(cost: float, compiler: str) -> MeasureRecord:
        base = record(cost=cost)
        return dataclasses.replace(base, result=dataclasses.replace(base.result, compiler=compiler))

    log = write(
        tmp_path / "log.json",
        record(cost=4e-3),  # no note: gcc's, from before the note
        measured(3e-3, "gcc 12"),
        measured(2e-3, "clang 19"),
        measured(5e-3, "clang 18"),
    )
    assert main(["records", "distill", "-i", str(log)]) == 0
    assert "wrote 2 record(s)" in capsys.readouterr().out
    kept = load_records(tmp_path / "log.best.json")
    assert [(r.result.compiler, r.median_cost) for r in kept] == [
        ("gcc 12", 3e-3),
        ("clang 19", 2e-3),
    ]


def test_cli_distill_default_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write(tmp_path / "tune.json", record(cost=3e-3), record(cost=2e-3))
    assert main(["records", "distill", "-i", str(log)]) == 0
    assert str(tmp_path / "tune.best.json") in capsys.readouterr().out
    assert [r.median_cost for r in load_records(tmp_path / "tune.best.json")] == [2e-3]


def test_cli_show_prints_latency_gflops_trials_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # keep each table row on one line
    log = write(
        tmp_path / "log.json",
        record(cost=2e-6),
        record(cost=None, error=ErrorKind.TIMEOUT),
        record(cost=None, error=ErrorKind.TIMEOUT),
        record(cost=None, error=ErrorKind.COMPILE),
        record(cost=None, error=ErrorKind.RUNTIME, key=OTHER_KEY, flops=None),
    )
    assert main(["records", "show", str(log)]) == 0
    out = capsys.readouterr().out
    assert "2 task(s)" in out
    assert "2.00 us" in out and "0.21" in out  # 420 FLOPs in 2 us = 0.21 GFLOPS
    assert "compile 1" in out and "timeout 2" in out and "runtime 1" in out


def test_cli_errors_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["records", "show", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert "missing.json does not exist" in err and "RecordToFile" in err
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07\x12\x04onnx\xff\xfe\n{}\n")
    assert main(["records", "distill", "-i", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "holds no tuning record" in err and "is it a records file?" in err
    assert main(["records", "show", str(tmp_path)]) == 2
    assert "cannot read records file" in capsys.readouterr().err


def test_records_error_is_an_ember_error() -> None:
    assert issubclass(RecordsError, EmberError)
    with pytest.raises(RecordsError, match="version 2"):
        MeasureRecord.from_json({**record().to_json(), "version": 2})

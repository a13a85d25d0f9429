"""`ember tune`: a short run on a small MLP writes a loadable log with weights, prints
the scheduler's table and the summary; `ember compile --tuning-records` uses it;
resuming measures nothing twice; Ctrl-C leaves the log intact and exits 130; and the
messages of the errors a user can cause."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_models import one_node_model

from ember.autoschedule import LocalBuilder, extract_tasks, load_records
from ember.autoschedule.measure import Timing
from ember.autoschedule.records import ErrorKind, MeasureRecord, fastest_trials, steps_key
from ember.autoschedule.task_scheduler import SchedulerResult
from ember.cli import build_parser, main
from ember.cli_commands import tune as tune_command
from ember.cli_commands.common import load_model, parse_shapes
from ember.target import Target
from ember.toolchain import find_compiler

REPO = Path(__file__).resolve().parents[1]
# The built-in MLP on 1 x 3 x 8 x 8 images: 4 tasks, each measured in milliseconds.
SMALL_MLP = ["mlp", "--input-shapes", "data:[1,3,8,8]"]
FAST = ["--cost-model", "random", "--min-repeat-ms", "0", "--seed", "0"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def tuned_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A 16-trial run (asked for rounds of 8: four of 4) and what it printed."""
    log = tmp_path_factory.mktemp("tune") / "mlp.records.json"
    argv = ["tune", *SMALL_MLP, "--trials", "16", "--per-round", "8", *FAST, "-o", str(log)]
    capture = subprocess.run(
        [sys.executable, "-m", "ember.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert capture.returncode == 0, capture.stderr
    return log, capture.stdout


def test_tune_writes_a_log_with_weights_and_prints_table_and_summary(
    tuned_log: tuple[Path, str],
) -> None:
    log, out = tuned_log
    records = load_records(log)
    trials = [record for record in records if record.is_trial]
    assert len(trials) == 16
    # The end-of-run check wrote the times in the network of each tuned task's
    # default and fastest schedules.
    in_network = [record for record in records if not record.is_trial]
    assert in_network and all(record.result.in_network for record in in_network)
    assert "with the default schedules profiled alternately" in out
    assert all(record.task.weight == 1 for record in records)
    assert all(record.task.flops for record in records)
    assert "Extracted 4 tasks" in out and "dense_pack_add_relu" in out
    compiler = find_compiler(Target("llvm"))
    assert f"Compiler: {compiler.command[0]} ({compiler.version}); the records" in out
    # Trials and in-network times alike note the compiler that built them.
    assert {record.result.compiler for record in records} == {compiler.identity}
    assert "|  ID  | Latency (ms) | Speed (GFLOPS) | Trials |" in out
    assert "Estimated total latency:" in out
    assert "Tuned 16 trials over 4 tasks in" in out and "build" in out and "run" in out
    # 16 trials do not give four tasks a round of 8 each: rounds of 4 reach them all.
    assert "Tuning 16 trials, 4 per round (of 8: every task gets a round)" in out
    assert "Estimated end-to-end latency: " in out
    assert [line.count("|") for line in out.splitlines() if line.startswith("|    3 |")]
    assert f"Records: {log} (16 new)" in out
    assert (
        f"Next: ember compile mlp --target llvm --input-shapes 'data:[1,3,8,8]' "
        f"--tuning-records {log} -o mlp.tuned.tar" in out
    )


def test_compile_uses_the_tuned_log(
    tuned_log: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, _ = tuned_log
    artifact = tmp_path / "mlp.tuned.tar"
    code, out, _ = run_cli(capsys, "compile", *SMALL_MLP, "--tuning-records", log, "-o", artifact)
    assert code == 0
    assert "tuned schedules: 4 of " in out  # every task had a round
    assert artifact.is_file()


def test_resume_measures_nothing_twice(
    tuned_log: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ember.autoschedule import calibration

    # Calibrated however busy the machine is (a busy one falls back to cold-weights:
    # test_a_failed_calibration_falls_back_to_cold_weights).
    monkeypatch.setattr(calibration, "MAX_PLAUSIBLE_ERROR", math.inf)
    built: list[str | None] = []  # the records each network was built with
    open_network = tune_command._open_network

    def counted(graph, params, tasks, tuning_records=None):  # type: ignore[no-untyped-def]
        built.append(tuning_records)
        return open_network(graph, params, tasks, tuning_records)

    monkeypatch.setattr(tune_command, "_open_network", counted)
    log, _ = tuned_log
    resumed = tmp_path / "resumed.json"
    resumed.write_bytes(log.read_bytes())
    code, out, _ = run_cli(capsys, "tune", *SMALL_MLP, "--trials", "32", "--per-round", "8",
                           *FAST, "--tuning-records", resumed, "-o", resumed)  # fmt: skip
    assert code == 0
    assert f"resuming from {resumed}" in out and f"Records: {resumed} (32 new)" in out
    # One network of default schedules, the calibration's: the recalibrations ran
    # the bests in its steps and the check its candidates; built from the records,
    # only the check's network of the chosen schedules.
    assert out.count("Recalibrated on the network with the best schedules") >= 2
    assert built == [None, str(resumed)]
    records = [record for record in load_records(resumed) if record.is_trial]
    assert len(records) == 48
    seen = [(r.task.workload_key, steps_key(r.steps)) for r in records]
    assert len(set(seen)) == len(seen)
    # Every task has had a round now (the warm-up gives each one), so the estimate is
    # defined.
    assert "Estimated end-to-end latency: " in out and "in-network/alone ratio" in out
    assert "Timing calibration: the network with default schedules runs in" in out
    assert "Measured in the network: " in out and "the estimate is " in out
    assert "Estimated end-to-end latency after the check: " in out


def test_the_check_in_the_network_gives_each_task_its_fastest_schedule_there(
    tuned_log: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The end-of-run check: each tuned task's default and fastest schedules run in its
    steps in turn; the records then give each task the one fastest in the network (the
    default where that won, not only the lone best otherwise), and `ember compile`
    builds those."""
    from ember.autoschedule import calibration
    from ember.autoschedule.records import ApplyHistoryBest
    from ember.schedule.default import default_schedule

    log = tmp_path / "log.json"
    log.write_text("".join(r.to_line() for r in load_records(tuned_log[0]) if r.is_trial))
    graph, params = load_model("mlp", parse_shapes(SMALL_MLP[2]))
    tasks, _ = extract_tasks(graph, params, "llvm")
    keys = [task.workload_key for task in tasks]
    fastest = fastest_trials(str(log), keys, tune_command.CHECK_CANDIDATES)
    defaults = [
        steps_key(default_schedule(t.compute_dag, t.target).steps)  # type: ignore[arg-type]
        for t in tasks
    ]
    tuned = [
        [r for r in records if steps_key(r.steps) != default]
        for records, default in zip(fastest, defaults, strict=True)
    ]
    checked = [i for i, candidates in enumerate(tuned) if candidates]
    assert checked, "the 16 trials found no schedule other than the defaults"
    slow = checked[0]
    swapped: list[tuple[int, int]] = []

    def fake_swaps(module, tasks, index, libraries, rounds=3, repeat=5):  # type: ignore[no-untyped-def]
        swapped.append((index, len(libraries)))
        assert all(library.ok for library in libraries)
        if index == slow:  # the default (first) wins in the network
            return [1e-4] + [2e-4] * (len(libraries) - 1)
        return [3e-4 - 1e-5 * position for position in range(len(libraries))]  # the last

    def fake_profiles(modules, tasks):  # type: ignore[no-untyped-def]
        return [([1e-4] * len(tasks), 1.0e-3), ([2e-4] * len(tasks), 1.2e-3)]

    monkeypatch.setattr(calibration, "swapped_in_network_times", fake_swaps)
    monkeypatch.setattr(tune_command, "_alternate_profiles", fake_profiles)
    # The trials' bests: 0.2 ms a call, 1.25x that in the network, run 2 or 3 times
    # each, and 0.1 ms of untuned steps; the chosen network takes 1 ms (fake_profiles).
    count = len(tasks)
    weights = tuple(2 + index % 2 for index in range(count))
    result = SchedulerResult(tuple(tasks), weights, (2e-4,) * count, (4,) * count, 1.0,
                             False, (), ratios=(1.25,) * count, untuned_seconds=1e-4)  # fmt: skip
    trials_estimate = sum(weights) * 2.5e-4 + 1e-4
    assert result.estimated_latency == pytest.approx(trials_estimate)
    # A task whose schedules do not all build is not checked: its trials decide.
    broken = checked[-1] if len(checked) > 1 else None
    with LocalBuilder() as builder:
        build = builder.build

        def build_breaking_one(inputs, known_code=None):  # type: ignore[no-untyped-def]
            built = build(inputs, known_code)
            if broken is not None and inputs[0].task.workload_key == tasks[broken].workload_key:
                built[-1] = dataclasses.replace(built[-1], path=None, error=ErrorKind.COMPILE)
            return built

        monkeypatch.setattr(builder, "build", build_breaking_one)
        # The calibration had profiled the default network at 1 ms; the check at 1.2.
        lines = tune_command.check_in_network(
            graph, params, tasks, str(log), result, builder, calibrated_seconds=1.0e-3
        )
    timed = [i for i in checked if i != broken]
    assert swapped == [(i, 1 + len(tuned[i])) for i in timed]
    # After the check, each timed task counts its fastest time in the network.
    there = {i: 1e-4 if i == slow else 3e-4 - 1e-5 * len(tuned[i]) for i in timed}
    estimate = sum(weights[i] * there.get(i, 2.5e-4) for i in range(count)) + 1e-4
    assert lines == [
        f"{len(timed)} tuned tasks checked in the network: {len(timed) - 1} run a tuned "
        f"schedule, 1 ran fastest with their default (ID {slow}) (the records now say so: "
        "in-network records)",
        *([f"Not checked, the trials' bests kept: ID {broken} (a schedule did not build)"]
          if broken is not None else []),
        f"Estimated end-to-end latency after the check: {tune_command._seconds(estimate)} (each "
        "checked task's fastest schedule in the network x weight, the others' best x "
        "weight x ratio, plus the untuned steps)",
        "Measured in the network: 1.000 ms with the chosen schedules, against 1.200 ms with "
        f"the default schedules profiled alternately (1.20x); the estimate is "
        f"{estimate / 1e-3 * 100:.0f}% of it (the trials' {trials_estimate / 1e-3 * 100:.0f}%)",
        calibration.drift_line(1.0e-3, 1.2e-3),
    ]  # fmt: skip
    chosen = ApplyHistoryBest(log)
    for index in checked:
        best = chosen.best(tasks[index].workload_key, "llvm")
        assert best is not None and best.is_trial == (index == broken)
        if index == broken:
            continue
        want = defaults[index] if index == slow else steps_key(tuned[index][-1].steps)
        assert steps_key(best.steps) == want


def test_records_train_a_cost_model_that_warm_starts_tuning(
    tuned_log: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, _ = tuned_log
    model = tmp_path / "mlp.cost.npz"
    code, out, _ = run_cli(capsys, "records", "train", log, "--model", SMALL_MLP[0],
                           "--input-shapes", SMALL_MLP[2], "-o", model)  # fmt: skip
    assert code == 0 and "trained on 16 record(s) of 4 task(s)" in out and model.is_file()
    warm = tmp_path / "warm.json"
    code, out, _ = run_cli(capsys, "tune", *SMALL_MLP, "--trials", "8", "--per-round", "8",
                           "--seed", "0", "--min-repeat-ms", "0", "--timing", "warm",
                           "--warm-start", model, "-o", warm)  # fmt: skip
    assert code == 0 and len([r for r in load_records(warm) if r.is_trial]) == 8
    # Records of another model's tasks (the MLP's dense layers; its 1000-class softmax
    # is SqueezeNet's too).
    dense = tmp_path / "dense.json"
    graph, params = load_model("mlp", parse_shapes(SMALL_MLP[2]))
    softmax = next(t for t in extract_tasks(graph, params, "llvm")[0] if t.desc == "softmax")
    kept = [r for r in load_records(log) if r.task.workload_key != softmax.workload_key]
    dense.write_text("".join(record.to_line() for record in kept))
    code, _, err = run_cli(capsys, "records", "train", dense, "--model", "squeezenet_v1.1",
                           "-o", model)  # fmt: skip
    assert code == 2 and "none of the records" in err
    code, _, err = run_cli(capsys, "tune", *SMALL_MLP, "--warm-start", tmp_path / "no.npz",
                           "-o", tmp_path / "w.json")  # fmt: skip
    assert code == 2 and "--warm-start" in err and "records train" in err


def test_a_failed_calibration_falls_back_to_cold_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ember.autoschedule import calibration

    def fail(*args: object, **kwargs: object) -> None:
        raise calibration.CalibrationError("no timing could time every task")

    monkeypatch.setattr(calibration, "calibrate", fail)
    log = tmp_path / "log.json"
    code, out, _ = run_cli(capsys, "tune", *SMALL_MLP, "--trials", "4", "--per-round", "4",
                           *FAST, "-o", log)  # fmt: skip
    assert code == 0 and len([r for r in load_records(log) if r.is_trial]) == 4
    assert "Timing: cold-weights (the calibration failed: no timing could time" in out
    # The check in the network does not need a calibration.
    assert "with the default schedules profiled alternately" in out


def test_a_failed_check_in_the_network_leaves_the_trials_bests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ember.autoschedule import calibration

    def fail(*args: object, **kwargs: object) -> None:
        raise calibration.CalibrationError("the profile of the network has no step")

    monkeypatch.setattr(calibration, "swapped_in_network_times", fail)
    log = tmp_path / "log.json"
    code, out, _ = run_cli(capsys, "tune", *SMALL_MLP, "--trials", "4", "--per-round", "4",
                           *FAST, "--timing", "cold-weights", "-o", log)  # fmt: skip
    assert code == 0 and all(record.is_trial for record in load_records(log))
    assert "Not checked, the trials' bests kept: ID " in out
    assert "(the profile of the network has no step)" in out


def _wait_for_records(log: Path, process: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (log.exists() and log.stat().st_size > 0):
        if process.poll() is not None:
            pytest.fail(f"ember tune ended before its first round: {process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("ember tune wrote no round in time")
        time.sleep(0.05)


def test_ctrl_c_stops_cleanly_with_the_log_intact(tmp_path: Path) -> None:
    log = tmp_path / "interrupted.json"
    argv = ["tune", *SMALL_MLP, "--trials", "10000", "--per-round", "4", *FAST, "-o", str(log)]
    process = subprocess.Popen(
        # faulthandler: should it ever hang, SIGABRT prints where (see below).
        [sys.executable, "-X", "faulthandler", "-m", "ember.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        # A test run started in the background (`make test &`) ignores SIGINT, and a child
        # inherits that: Python then installs no KeyboardInterrupt handler at all.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for_records(log, process, timeout=120)
    time.sleep(0.3)  # into the next round, so that one is in flight
    process.send_signal(signal.SIGINT)
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        if process.poll() is not None:  # it ended, but its output is still held open
            process.kill()
            pytest.fail(
                f"ember tune exited ({process.returncode}) but a process it started "
                "still holds its stdout or stderr 120 s after Ctrl-C"
            )
        process.send_signal(signal.SIGABRT)  # every thread's stack to stderr, then exit
        try:
            _, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            err = "(no stacks: stderr stayed open)"
        pytest.fail(f"ember tune did not stop within 120 s of Ctrl-C; its stacks:\n{err}")
    assert process.returncode == 130, err
    assert "Tuning stopped by Ctrl-C" in out
    assert f"Interrupted: resume with --tuning-records {log}" in err
    assert "Traceback" not in err
    lines = log.read_text().splitlines()
    assert lines
    # Every line is a record; only a last line cut mid-write may be damaged.
    for line in lines[:-1]:
        MeasureRecord.from_json(json.loads(line))
    assert len(load_records(log)) >= len(lines) - 1 >= 3


@pytest.mark.parametrize(
    ("options", "timing", "settings"),
    [
        ([], Timing.COLD_WEIGHTS, (1, 10, 0.0)),  # auto: until calibration chooses
        (["--timing", "warm"], Timing.WARM, (1, 5, 5.0)),
        (["--timing", "cold-weights"], Timing.COLD_WEIGHTS, (1, 10, 0.0)),
        (["--timing", "cold"], Timing.COLD, (1, 10, 0.0)),
        (["--cpu-cache-flush"], Timing.COLD, (1, 10, 0.0)),
        (["--cpu-cache-flush", "--no-cpu-cache-flush"], Timing.WARM, (1, 5, 5.0)),
        (["--timing", "cold-weights", "--number", "2"], Timing.COLD_WEIGHTS, (2, 10, 0.0)),
        (["--min-repeat-ms", "5", "--repeat", "4"], Timing.COLD_WEIGHTS, (1, 4, 5.0)),
        (["--timing", "warm", "--repeat", "4"], Timing.WARM, (1, 4, 5.0)),
    ],
)
def test_timing_options_and_their_defaults(
    options: list[str], timing: Timing, settings: tuple[int, int, float], tmp_path: Path
) -> None:
    argv = ["tune", *SMALL_MLP, *options, "-o", str(tmp_path / "log.json")]
    args = build_parser().parse_args(argv)
    tune_command._check_options(args)
    runner = tune_command.make_runner(args)
    assert runner.timing is timing
    assert (runner.number, runner.repeat, runner.min_repeat_ms) == settings


# -- errors a user can cause ---------------------------------------------------------------


def test_missing_previous_records_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "old.json"
    code, _, err = run_cli(capsys, "tune", *SMALL_MLP, "--tuning-records", missing,
                           "-o", tmp_path / "new.json")  # fmt: skip
    assert code == 2
    assert f"--tuning-records '{missing}' does not exist" in err


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "is a directory; give the records file's name"),
        ("absent/log.json", "does not exist"),
    ],
)
def test_bad_output_is_a_usage_error(
    output: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "tune", *SMALL_MLP, "-o", tmp_path / output)
    assert code == 2
    assert message in err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--trials", "0"], "--trials 0 must be positive"),
        (["--per-round", "-1"], "--per-round -1 must be positive"),
        (["--min-repeat-ms", "-5"], "--min-repeat-ms -5.0 must be 0 or more"),
    ],
)
def test_bad_numbers_are_usage_errors(
    option: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "tune", *SMALL_MLP, *option, "-o", tmp_path / "log.json")
    assert code == 2
    assert message in err


def test_unknown_timing_lists_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", *SMALL_MLP, "--timing", "hot", "-o", str(tmp_path / "log.json")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    # (Python versions quote the choices differently.)
    assert "invalid choice: 'hot'" in err and "cold-weights" in err


def test_bad_target_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "tune", *SMALL_MLP, "--target", "tpu", "-o", tmp_path / "l")
    assert code == 2
    assert "ember: error:" in err and "tpu" in err


def test_model_without_tasks_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "relu.onnx"
    onnx.save(one_node_model("Relu", np.zeros((2, 3), np.float32), opset=17), model)
    code, _, err = run_cli(capsys, "tune", model, "-o", tmp_path / "log.json")
    assert code == 2
    assert "has no task to tune for target 'llvm'" in err
    assert "--include-simple-tasks also tunes those" in err


def test_unavailable_cost_model_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module set to None in sys.modules cannot be imported: as if not installed.
    monkeypatch.setitem(sys.modules, "ember.autoschedule.xgb_model", None)
    code, _, err = run_cli(capsys, "tune", *SMALL_MLP, "-o", tmp_path / "log.json")
    assert code == 2
    assert "the 'xgb' cost model cannot be loaded" in err and "--cost-model random" in err
    assert not (tmp_path / "log.json").exists()


def test_tune_is_registered_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    out = capsys.readouterr().out
    for option in ("--trials", "--per-round", "--tuning-records", "--early-stopping",
                   "--timeout", "--number", "--repeat", "--min-repeat-ms", "--parallel",
                   "--include-simple-tasks", "--cost-model", "--strategy", "--seed",
                   "--timing", "{auto,warm,cold-weights,cold}", "--cpu-cache-flush"):  # fmt: skip
        assert option in out


def test_the_summary_says_which_tasks_have_no_schedule_yet(tmp_path: Path) -> None:
    args = build_parser().parse_args(["tune", *SMALL_MLP, "-o", str(tmp_path / "r.json")])
    graph, params = load_model("mlp", parse_shapes(SMALL_MLP[2]))
    tasks, weights = extract_tasks(graph, params, "llvm")
    best = (1e-3, *[math.inf] * (len(tasks) - 1))
    result = SchedulerResult(
        tuple(tasks), tuple(weights), best, (8,) + (0,) * (len(tasks) - 1), 1.0, False, ()
    )
    lines = tune_command.describe_result(result, args, 8)
    assert (
        "Estimated end-to-end latency: - (no valid schedule yet for task(s) 1, 2, 3; tune "
        "longer)" in lines
    )

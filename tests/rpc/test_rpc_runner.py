"""RPCRunner: candidates timed and checked on boards behind a tracker give the results
a LocalRunner gives (costs, the same error kinds for crashing, hanging, failing and
wrong candidates); a network tuned on two boards at once gives loadable records and a
tuned build equal to the reference; a board killed mid-tune costs only its
candidates, a new one registers, and a tracker restart loses neither the boards nor
the run."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from autoschedule.test_runner import FAULTY_C, faulty
from farm import WAIT, Farm, board_counts, wait_until

import ember
from ember.autoschedule import (
    LocalBuilder,
    RecordToFile,
    TaskScheduler,
    Timing,
    TuningOptions,
    extract_tasks,
)
from ember.autoschedule.measure import BuildResult, MeasureInput, release
from ember.autoschedule.records import ErrorKind, load_records
from ember.autoschedule.rpc_runner import RPCRunner
from ember.graph import interpret
from ember.schedule.default import default_schedule
from ember.toolchain import compile_shared

KEY = "x86-board"
HANG_GUARD = 600.0  # a runner timeout no finishing candidate can reach


@pytest.fixture(scope="module")
def network() -> tuple[ember.graph.Graph, dict[str, np.ndarray]]:
    return ember.testing.get_workload("mlp", image_shape=(1, 16, 16), num_classes=10)


@pytest.fixture(scope="module")
def softmax() -> Iterator[tuple[MeasureInput, BuildResult]]:
    graph, params = ember.testing.get_workload("resnet-18", image_shape=(3, 32, 32))
    tasks, _ = extract_tasks(graph, params, "llvm")
    task = next(t for t in tasks if t.desc == "softmax")
    measure_input = MeasureInput(task, default_schedule(task.compute_dag, task.target))
    with LocalBuilder(n_parallel=1) as builder:
        (built,) = builder.build([measure_input])
        assert built.ok, built.message
        yield measure_input, built
        release([built])


def runner_for(farm: Farm, **options: object) -> RPCRunner:
    host, port = farm.address.split(":")
    return RPCRunner(KEY, host, int(port), **options)  # type: ignore[arg-type]


def test_faulty_candidates_get_the_local_error_kinds(
    farm: Farm, softmax: tuple[MeasureInput, BuildResult]
) -> None:
    farm.add_server(KEY)
    measure_input, good = softmax
    library = compile_shared([FAULTY_C], "llvm")
    with runner_for(farm, n_parallel=1, min_repeat_ms=1, timeout=HANG_GUARD) as runner:
        results = runner.run([measure_input] * 2, [faulty(library, "null", good), good])
        runner.timeout = 1.0  # for the endless loop only: a good candidate must finish
        results += runner.run([measure_input], [faulty(library, "spin", good)])
        runner.timeout = HANG_GUARD
        results += runner.run([measure_input] * 2, [faulty(library, "fail", good), good])
        wrong = runner.check(measure_input, faulty(library, "wrong", good))
        fine = runner.check(measure_input, good)
    errors = [r.error for r in results]
    none, runtime = ErrorKind.NONE, ErrorKind.RUNTIME
    assert errors == [runtime, none, ErrorKind.TIMEOUT, runtime, none], [r.message for r in results]
    assert "SIGSEGV" in results[0].message and "on the board" in results[0].message
    assert "error status -1" in results[3].message
    assert all(r.costs[0] > 0 for r in (results[1], results[4]))
    assert wrong.error is ErrorKind.WRONG_ANSWER and "outside the tolerance" in wrong.message
    assert fine.error is ErrorKind.NONE, fine.message


def test_cold_weights_timing_on_a_board(
    farm: Farm, softmax: tuple[MeasureInput, BuildResult]
) -> None:
    farm.add_server(KEY)
    host, port = farm.address.split(":")
    runner = RPCRunner.for_timing(Timing.COLD_WEIGHTS, KEY, host, int(port), n_parallel=1)
    with runner:
        assert (runner.number, runner.repeat, runner.cold_weights) == (1, 10, True)
        (result,) = runner.run([softmax[0]], [softmax[1]])
    assert result.ok and len(result.costs) == 10, result.message


def test_a_network_tuned_on_two_boards(
    farm: Farm, network: tuple[ember.graph.Graph, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    graph, params = network
    for _ in range(2):
        farm.add_server(KEY)
    tasks, weights = extract_tasks(graph, params, "llvm")
    log = tmp_path / "records.json"
    busy: list[int] = []

    def watch(records: object) -> None:  # after each round, while the boards are held
        busy.append(board_counts(farm.tracker, KEY)["free"])

    runner = runner_for(farm, min_repeat_ms=0)
    with runner:
        options = TuningOptions(
            num_measure_trials=8 * len(tasks), num_measures_per_round=8, runner=runner,
            measure_callbacks=[RecordToFile(log), watch], verbose=0,
        )  # fmt: skip
        TaskScheduler(tasks, weights).tune(options)
        assert runner.boards == 2
    assert busy and all(free == 0 for free in busy), "both boards were held while tuning"
    records = list(load_records(log))
    assert len(records) == 8 * len(tasks)
    assert {r.task.workload_key for r in records if r.result.error is ErrorKind.NONE} == {
        t.workload_key for t in tasks
    }
    library = ember.build(graph, "llvm", params=params, tuning_records=log)
    module = ember.runtime.Module.from_library(library)
    x = np.random.default_rng(0).standard_normal(module.inputs[0].shape).astype("float32")
    module.set_input(0, x)
    module.run()
    expected = interpret(graph, params, {graph.inputs[0].name: x})
    np.testing.assert_allclose(
        module.get_output(0), next(iter(expected.values())), rtol=1e-4, atol=1e-6
    )
    wait_until(lambda: board_counts(farm.tracker, KEY)["free"] == 2, "the boards freed")


def test_a_lost_board_costs_only_its_candidates(
    farm: Farm, softmax: tuple[MeasureInput, BuildResult], caplog: pytest.LogCaptureFixture
) -> None:
    first = farm.start_server_process(KEY)
    farm.start_server_process(KEY)
    measure_input, built = softmax
    with runner_for(farm, n_parallel=2, min_repeat_ms=0) as runner:
        assert all(r.ok for r in runner.run([measure_input] * 4, [built] * 4))
        assert runner.boards == 2
        first.send_signal(signal.SIGKILL)
        first.wait(WAIT)
        with caplog.at_level(logging.WARNING, logger="ember.rpc"):
            results = runner.run([measure_input] * 6, [built] * 6)
        # Each candidate the dead board held was measured again on the other one.
        assert all(r.ok for r in results), [r.message for r in results]
        assert runner.boards == 1
        assert any("lost" in record.getMessage() for record in caplog.records)
        wait_until(lambda: board_counts(farm.tracker, KEY)["total"] == 1, "the dead board gone")
        # A board started again registers by itself and is free for others.
        farm.start_server_process(KEY)
        assert board_counts(farm.tracker, KEY) == {"total": 2, "free": 1, "pending": 0}


def test_no_board_left_is_an_error_result_not_a_crash(
    farm: Farm, softmax: tuple[MeasureInput, BuildResult]
) -> None:
    only = farm.start_server_process(KEY)
    measure_input, built = softmax
    with runner_for(farm, n_parallel=1, min_repeat_ms=0, request_timeout=0.5) as runner:
        assert runner.run([measure_input], [built])[0].ok
        only.send_signal(signal.SIGKILL)
        only.wait(WAIT)
        (result,) = runner.run([measure_input], [built])
    assert result.error is ErrorKind.RUNTIME
    assert "not measured" in result.message and KEY in result.message


def test_a_tracker_restart_loses_no_board_and_no_run(
    farm: Farm, softmax: tuple[MeasureInput, BuildResult]
) -> None:
    for _ in range(2):
        farm.add_server(KEY)
    measure_input, built = softmax
    with runner_for(farm, n_parallel=2, min_repeat_ms=0) as runner:
        assert all(r.ok for r in runner.run([measure_input] * 2, [built] * 2))
        farm.restart_tracker()
        # The boards come back by themselves (still busy: the runner holds them) ...
        wait_until(lambda: board_counts(farm.tracker, KEY)["total"] == 2, "re-registration")
        assert board_counts(farm.tracker, KEY)["free"] == 0
        # ... and the run carries on; the runner's tracker client reconnects.
        assert all(r.ok for r in runner.run([measure_input] * 4, [built] * 4))
        assert runner.tracker.summary()["keys"][KEY]["total"] == 2
    wait_until(lambda: board_counts(farm.tracker, KEY)["free"] == 2, "the boards freed")


def test_ember_tune_on_the_farm(farm: Farm, tmp_path: Path) -> None:
    from ember.cli import main

    for _ in range(2):
        farm.add_server(KEY)
    log = tmp_path / "tuned.json"
    command = ["tune", "mlp", "--input-shapes", "data:[1,1,16,16]", "--rpc-tracker",
               farm.address, "--rpc-key", KEY, "-o", str(log), "--trials", "8",
               "--per-round", "4", "--seed", "0"]  # fmt: skip
    assert main(command) == 0
    records = list(load_records(log))
    assert len(records) == 8 and any(r.result.error is ErrorKind.NONE for r in records)
    assert main([*command[:4], "--rpc-tracker", farm.address, "-o", str(log)]) == 2  # no key


def test_a_board_that_hangs_costs_only_its_candidate(
    farm: Farm, softmax: tuple[MeasureInput, BuildResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ember.rpc.client

    # How long the host waits past the runner's timeout before it gives a silent board
    # up (30 s by default: transfers, a loaded board).
    monkeypatch.setattr(ember.rpc.client, "REPLY_MARGIN_SECONDS", 1.0)
    stuck = farm.start_server_process(KEY)
    farm.start_server_process(KEY)
    measure_input, built = softmax
    try:
        with runner_for(farm, n_parallel=2, min_repeat_ms=0, timeout=10.0) as runner:
            assert all(r.ok for r in runner.run([measure_input] * 2, [built] * 2))
            stuck.send_signal(signal.SIGSTOP)  # a board frozen, or cut off the network
            results = runner.run([measure_input] * 4, [built] * 4)
            assert all(r.ok for r in results), [r.message for r in results]
            assert runner.boards == 1
    finally:
        stuck.kill()
        stuck.wait(WAIT)


def test_a_board_for_another_target_is_refused_every_time(
    farm: Farm, softmax: tuple[MeasureInput, BuildResult]
) -> None:
    from ember.rpc.client import TargetMismatch

    farm.add_server(KEY)
    graph, params = ember.testing.get_workload("resnet-18", image_shape=(3, 32, 32))
    tasks, _ = extract_tasks(graph, params, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    arm_task = next(t for t in tasks if t.desc == "softmax")
    arm_input = MeasureInput(arm_task, default_schedule(arm_task.compute_dag, arm_task.target))
    with runner_for(farm, n_parallel=1, min_repeat_ms=0) as runner:
        for _ in range(2):  # the board went back to the runner: no wait for it the second time
            with pytest.raises(TargetMismatch, match="the board is x86_64"):
                runner.run([arm_input], [softmax[1]])
        assert runner.run([softmax[0]], [softmax[1]])[0].ok


def test_stopping_a_server_ends_a_running_candidate_and_cleans_up(
    farm: Farm, softmax: tuple[MeasureInput, BuildResult], tmp_path: Path
) -> None:
    import threading

    server = farm.add_server(KEY, work_dir=str(tmp_path))
    measure_input, good = softmax
    spin = faulty(compile_shared([FAULTY_C], "llvm"), "spin", good)
    results = []
    with runner_for(farm, n_parallel=1, timeout=HANG_GUARD, request_timeout=1.0) as runner:
        thread = threading.Thread(
            target=lambda: results.extend(runner.run([measure_input], [spin]))
        )
        thread.start()
        wait_until(lambda: any(tmp_path.glob("ember-session-*/candidate-*.so")), "the upload")
        server.stop()  # the candidate would spin for HANG_GUARD seconds
        thread.join(WAIT)
        assert not thread.is_alive()
    assert results[0].error is ErrorKind.RUNTIME
    assert not list(tmp_path.glob("ember-session-*")), "the work directory was left behind"

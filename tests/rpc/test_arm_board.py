"""Emulated AArch64 boards (`ember.testing.arm_board`: Debian's arm64 Python running the
device server bundle under qemu-aarch64) behind a tracker: an AArch64 network runs on
one with the reference interpreter's outputs, and candidates for an AArch64 task are
timed and checked on two at once. Skips, saying why, where the boards cannot be set up
(`python -m ember.testing.arm_board --setup`, which `make test` runs as root). Times
under emulation mean nothing; only behaviour and numbers are checked."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from boards import check_every_kernel_family, run_the_seeds_flow
from farm import WAIT, Farm, board_counts, wait_until
from quantized_models import conv_chain, quantized

import ember
from ember.autoschedule import LocalBuilder, extract_tasks
from ember.autoschedule.measure import MeasureInput, release
from ember.autoschedule.rpc_runner import RPCRunner
from ember.cli import main
from ember.frontend import from_onnx
from ember.graph import interpret
from ember.schedule.default import default_schedule
from ember.testing.arm_board import ArmBoard, unavailable_reason

KEY = "rasp4b-64"
TARGET = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"


@pytest.fixture(scope="module")
def arm_farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no emulated AArch64 board: {reason}")
    farm = Farm()
    boards = []
    try:
        for index in range(2):
            work_dir = tmp_path_factory.mktemp(f"arm-board-{index}")
            boards.append(ArmBoard(farm.address, KEY, work_dir=str(work_dir)))
        wait_until(lambda: board_counts(farm.tracker, KEY)["total"] == 2, "two AArch64 boards")
        yield farm
    finally:
        for board in boards:
            board.stop()
        farm.stop()


def test_an_aarch64_network_runs_on_an_emulated_board(arm_farm: Farm, tmp_path: Path) -> None:
    graph, params = ember.testing.get_workload("mlp", image_shape=(1, 16, 16), num_classes=10)
    try:
        library = ember.build(graph, TARGET, params=params)
    except ember.EmberError as error:
        pytest.skip(f"no aarch64 cross compiler: {error}")
    artifact = library.export_library(tmp_path / "mlp-aarch64.tar")
    x = np.random.default_rng(0).standard_normal((1, 1, 16, 16)).astype("float32")
    np.savez(tmp_path / "x.npz", data=x)
    command = ["run", str(artifact), "--rpc-tracker", arm_farm.address, "--rpc-key", KEY,
               "--inputs", str(tmp_path / "x.npz"), "-o", str(tmp_path / "out.npz"),
               "--print-time", "--repeat", "2"]  # fmt: skip
    assert main(command) == 0
    (expected,) = interpret(graph, params, {"data": x}).values()
    remote = np.load(tmp_path / "out.npz")["output_0"]
    np.testing.assert_allclose(remote, expected, rtol=1e-4, atol=1e-6)
    devices = [server["device"] for server in arm_farm.tracker.summary()["servers"]]
    assert [d["triple"] for d in devices] == ["aarch64-linux-gnu"] * 2


@pytest.mark.parametrize("dotprod", [True, False], ids=["dotprod", "no_dotprod"])
def test_quantized_convs_run_on_an_emulated_board(
    arm_farm: Farm, tmp_path: Path, dotprod: bool
) -> None:
    """int8 convs cross-compiled with +dotprod take `sdot` (the disassembly shows it);
    without, widened multiplies and pair sums (`saddlp`); both equal the reference
    interpreter exactly."""
    model, shape = conv_chain(channels=3)
    graph, params = from_onnx(quantized(model, shape))
    target = f"{TARGET},+dotprod" if dotprod else TARGET
    try:
        library = ember.build(graph, target, params=params)
    except ember.EmberError as error:
        pytest.skip(f"no aarch64 cross compiler: {error}")
    disassembly = subprocess.run(
        ["aarch64-linux-gnu-objdump", "-d", str(library.so_path)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert ("\tsdot\t" in disassembly) == dotprod
    assert ("\tsaddlp\t" in disassembly) != dotprod  # baseline NEON: widened pair sums
    artifact = library.export_library(tmp_path / "qconv-aarch64.tar")
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    np.savez(tmp_path / "x.npz", x=x)
    command = ["run", str(artifact), "--rpc-tracker", arm_farm.address, "--rpc-key", KEY,
               "--inputs", str(tmp_path / "x.npz"), "-o", str(tmp_path / "out.npz")]  # fmt: skip
    assert main(command) == 0
    (expected,) = interpret(graph, params, {"x": x}).values()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["output_0"], expected)


def test_aarch64_candidates_are_timed_and_checked_on_two_boards(arm_farm: Farm) -> None:
    graph, params = ember.testing.get_workload("resnet-18", image_shape=(3, 32, 32))
    tasks, _ = extract_tasks(graph, params, TARGET)
    chosen = [t for t in tasks if t.desc in ("softmax", "max_pool")]
    inputs = [MeasureInput(t, default_schedule(t.compute_dag, t.target)) for t in chosen] * 2
    host, port = arm_farm.address.split(":")
    runner = RPCRunner(KEY, host, int(port), n_parallel=2, min_repeat_ms=0, timeout=WAIT)
    with LocalBuilder(n_parallel=2) as builder, runner:
        built = builder.build(inputs)
        assert all(b.ok for b in built), [b.message for b in built]
        results = runner.run(inputs, built)
        assert runner.boards == 2
        verdicts = [runner.check(i, b) for i, b in zip(inputs[:2], built[:2], strict=True)]
        release(built)
    assert all(r.ok for r in results), [r.message for r in results]
    assert all(v.error.value == "none" for v in verdicts), [v.message for v in verdicts]


@pytest.mark.parametrize(
    ("size", "trials", "per_round"),
    [(64, 16, 8), pytest.param(224, 200, 64, marks=pytest.mark.slow)],
    ids=["64x64-16-trials", "224x224-200-trials"],
)
def test_the_seeds_flow_on_emulated_boards(
    arm_farm: Farm,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    size: int,
    trials: int,
    per_round: int,
) -> None:
    # `make test` tunes MobileNet at 64x64 briefly; `make test-all` the tutorial's
    # 224x224, 200 trials. Both boards measure.
    with caplog.at_level(logging.INFO, logger="ember.rpc"):
        run_the_seeds_flow(arm_farm.address, KEY, TARGET, size, trials, per_round,
                           tmp_path, capsys)  # fmt: skip
    assert "(2 boards)" in caplog.text


def test_every_kernel_family_on_an_emulated_board(arm_farm: Farm) -> None:
    check_every_kernel_family(arm_farm.address, KEY, TARGET, boards=2, timeout=WAIT)


def test_the_seeds_flow_from_python(arm_farm: Farm, tmp_path: Path) -> None:
    from ember.autoschedule import RecordToFile, TaskScheduler, TuningOptions
    from ember.rpc import connect_tracker

    graph, params = ember.testing.get_workload(
        "mobilenet", batch_size=1, layout="NHWC", image_shape=(32, 32, 3)
    )
    tasks, weights = extract_tasks(graph, params, ember.Target(TARGET))
    log = str(tmp_path / "records.json")
    host, port = arm_farm.address.split(":")
    runner = RPCRunner(KEY, host, int(port), repeat=1, min_repeat_ms=0,
                       enable_cpu_cache_flush=True, timeout=WAIT)  # fmt: skip
    with runner:
        TaskScheduler(tasks, weights).tune(TuningOptions(
            num_measure_trials=8, num_measures_per_round=8, runner=runner,
            measure_callbacks=[RecordToFile(log)], verbose=0,
        ))  # fmt: skip
    library = ember.build(graph, TARGET, params=params, tuning_records=log)
    path = library.export_library(tmp_path / "net.tar")
    x = np.random.default_rng(1).uniform(0, 1, (1, 32, 32, 3)).astype("float32")
    tracker = connect_tracker(host, int(port))
    with tracker, tracker.request(KEY, priority=1, timeout=WAIT) as remote:
        remote.upload(path)
        module = remote.load_module("net.tar")
        module.set_input("data", x)
        module.run()
        output = module.get_output(0)
        assert module.benchmark(repeat=2, min_repeat_ms=0).mean > 0
    (expected,) = interpret(graph, params, {"data": x}).values()
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-6)


def test_the_script_stops_its_boards_with_it(arm_farm: Farm) -> None:
    import signal
    import subprocess
    import sys

    from farm import ROOT

    command = [sys.executable, "-m", "ember.testing.arm_board", "--tracker", arm_farm.address,
               "--key", "scripted", "--count", "1"]  # fmt: skip
    script = subprocess.Popen(
        command, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: board_counts(arm_farm.tracker, "scripted")["total"] == 1, "the board")
        script.send_signal(signal.SIGTERM)
        assert script.wait(WAIT) == 0
        # The board's process ended with the script: its link to the tracker is gone.
        wait_until(lambda: board_counts(arm_farm.tracker, "scripted")["total"] == 0, "its end")
    finally:
        script.kill()
        script.wait(WAIT)

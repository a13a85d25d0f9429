"""What the emulated-board tests (AArch64 and 32-bit ARM) check alike: the tuning
tutorial's flow with Ember's commands, and every kernel family of the kernel tests,
built for the board's target under its default schedule, run on the board and
compared with the DAG's reference evaluation there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ember
from ember.autoschedule import LocalBuilder, extract_tasks
from ember.autoschedule.measure import MeasureInput, release
from ember.autoschedule.rpc_runner import RPCRunner
from ember.cli import main
from ember.graph import interpret
from ember.schedule.default import default_schedule


def run_the_seeds_flow(
    address: str, key: str, target: str, size: int, trials: int, per_round: int,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The tutorial's steps on the boards of `key` behind the tracker at `address`:
    `ember tasks` (MobileNet NHWC at `size` x `size`: the tutorial's 22 tasks), `ember
    tune` through the tracker, `ember compile` with the records, `ember run` on a
    board, its outputs equal to the reference interpreter's (fp32 tolerance)."""
    model = ["mobilenet", "--layout", "NHWC", "--input-shapes", f"data:[1,{size},{size},3]"]
    log, artifact = tmp_path / "mobilenet-NHWCB1-llvm.json", tmp_path / "net.tar"
    assert main(["tasks", *model, "--target", target]) == 0
    listed = capsys.readouterr().out
    assert "Task 0" in listed and "Task 21" in listed
    farm = ["--rpc-tracker", address, "--rpc-key", key]
    assert main(["tune", *model, "--target", target, *farm, "--trials", str(trials),
                 "--per-round", str(per_round), "--seed", "0", "-o", str(log)]) == 0  # fmt: skip
    assert main(["compile", *model, "--target", target, "--tuning-records", str(log),
                 "-o", str(artifact)]) == 0  # fmt: skip
    assert "tuned schedules:" in capsys.readouterr().out
    x = np.random.default_rng(0).uniform(0, 1, (1, size, size, 3)).astype("float32")
    np.savez(tmp_path / "x.npz", data=x)
    assert main(["run", str(artifact), *farm, "--inputs", str(tmp_path / "x.npz"), "-o",
                 str(tmp_path / "out.npz"), "--print-time", "--repeat", "3"]) == 0  # fmt: skip
    assert "Execution time summary" in capsys.readouterr().out
    graph, params = ember.testing.get_workload(
        "mobilenet", layout="NHWC", image_shape=(size, size, 3)
    )
    (expected,) = interpret(graph, params, {graph.inputs[0].name: x}).values()
    np.testing.assert_allclose(
        np.load(tmp_path / "out.npz")["output_0"], expected, rtol=1e-4, atol=1e-6
    )


def check_every_kernel_family(
    address: str, key: str, target: str, boards: int, timeout: float
) -> None:
    """Each op case of tests/test_kernels.py as a task for `target`, checked on the
    `boards` boards of `key` behind the tracker at `address` (HOST:PORT)."""
    from test_kernels import CASES, case_graph

    inputs, seen = [], set()
    for case in CASES:
        graph, params, _ = case_graph(case)
        tasks, _ = extract_tasks(graph, params, target, include_simple_tasks=True)
        for task in tasks:
            if task.workload_key not in seen:
                seen.add(task.workload_key)
                inputs.append(MeasureInput(task, default_schedule(task.compute_dag, task.target)))
    host, port = address.split(":")
    runner = RPCRunner(key, host, int(port), n_parallel=boards, min_repeat_ms=0, timeout=timeout)
    with LocalBuilder() as builder, runner:
        built = builder.build(inputs)
        assert all(b.ok for b in built), [b.message for b in built if not b.ok][:3]
        verdicts = [runner.check(i, b) for i, b in zip(inputs, built, strict=True)]
        release(built)
    wrong = [
        (i.task.desc, v.message)
        for i, v in zip(inputs, verdicts, strict=True)
        if v.error.value != "none"
    ]
    assert not wrong, wrong[:5]
    assert len(inputs) > 100

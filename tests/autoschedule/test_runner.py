"""LocalRunner: default-schedule candidates time and check, warm and with cold weights
(the builder marks the weight arguments, the helper hands them to the C timer);
hand-written faulty candidates (a NULL dereference, an endless loop, an error status,
wrong values) become RUNTIME / TIMEOUT / RUNTIME / WRONG_ANSWER results, and the helper
process restarts for the next candidate; nothing is left running after close()."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import te
from ember.autoschedule import HardwareParams, SearchTask, extract_tasks
from ember.autoschedule.builder import LocalBuilder
from ember.autoschedule.measure import ArgSpec, BuildResult, MeasureInput, Timing, release
from ember.autoschedule.measure_worker import Measurer
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.reference import (
    compare_outputs,
    reference_arguments,
    rounds_inexact_floats,
)
from ember.autoschedule.runner import LocalRunner, MeasureError, TimeRequest, timer_library
from ember.schedule.default import default_schedule
from ember.target import Target
from ember.toolchain import compile_shared

# The timeout of a runner whose candidates all finish: a guard against a hang, not a
# limit that a slow machine could reach.
HANG_GUARD = 600.0

# Packed entries in the kernels' calling convention, for softmax's (1, 1000) arguments.
FAULTY_C = """
#include <stdint.h>
#include <omp.h>
int32_t null_packed(void* const* args, int32_t num_args) {
  volatile float* nowhere = (volatile float*)0;
  *nowhere = 1.0f;
  return 0;
}
int32_t spin_packed(void* const* args, int32_t num_args) {
  volatile int64_t count = 0;
  for (;;) count = count + 1;
  return 0;
}
int32_t fail_packed(void* const* args, int32_t num_args) { return -1; }
int32_t wrong_packed(void* const* args, int32_t num_args) {
  float* out = (float*)args[num_args - 1];
  for (int i = 0; i < 1000; ++i) out[i] = 0.001f;
  return 0;
}
int32_t threads_packed(void* const* args, int32_t num_args) { return omp_get_max_threads(); }
"""


@pytest.fixture(scope="module")
def tasks() -> dict[str, SearchTask]:
    graph, params = ember.testing.get_workload("resnet-18", image_shape=(3, 32, 32))
    found, _ = extract_tasks(graph, params, "llvm")
    by_desc = {task.desc: task for task in found}
    # A 1x1 shortcut conv with its bias (named conv_pack_add when its weights are packed).
    conv = next(task for task in found if re.fullmatch(r"conv(_pack)?_add", task.desc))
    return {"conv": conv, "pool": by_desc["max_pool"], "softmax": by_desc["softmax"]}


@pytest.fixture(scope="module")
def built(tasks: dict[str, SearchTask]) -> Iterator[dict[str, tuple[MeasureInput, BuildResult]]]:
    inputs = {
        k: MeasureInput(t, default_schedule(t.compute_dag, t.target)) for k, t in tasks.items()
    }
    with LocalBuilder(n_parallel=2) as builder:
        results = builder.build(list(inputs.values()))
        assert all(r.ok for r in results), [r.message for r in results]
        yield {key: (inputs[key], result) for key, result in zip(inputs, results, strict=True)}
        release(results)


@pytest.fixture(scope="module")
def faulty_library() -> Path:
    return compile_shared([FAULTY_C], "llvm")


def faulty(library: Path, name: str, good: BuildResult) -> BuildResult:
    """A candidate for the same task as `good` whose packed entry is `name`_packed."""
    return BuildResult(str(library), f"{name}_packed", good.args)


def test_default_schedules_run_and_check(
    built: dict[str, tuple[MeasureInput, BuildResult]],
) -> None:
    inputs = [i for i, _ in built.values()]
    results = [r for _, r in built.values()]
    with LocalRunner(number=2, repeat=3, min_repeat_ms=5) as runner:
        measured = runner.run(inputs, results)
        for result, build in zip(measured, results, strict=True):
            assert result.ok, result.message
            assert len(result.costs) == 3 and all(c > 0 for c in result.costs)
            assert result.all_cost > build.time_cost
        for measure_input, result in zip(inputs, results, strict=True):
            verdict = runner.check(measure_input, result)
            assert verdict.error is ErrorKind.NONE, verdict.message
            assert verdict.costs == ()
        pid = runner._slot.worker.process.pid if runner._slot.worker else -1
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped: no zombie either


def test_built_arguments_mark_the_weights(
    built: dict[str, tuple[MeasureInput, BuildResult]],
) -> None:
    measure_input, conv = built["conv"]
    # data, the conv's weights, its bias; then the output.
    assert measure_input.task.weight_inputs == {1, 2}
    assert [(a.is_weight, a.is_output) for a in conv.args] == [
        (False, False),
        (True, False),
        (True, False),
        (False, True),
    ]
    _, softmax = built["softmax"]
    assert not any(a.is_weight for a in softmax.args)


def test_cold_weights_timing_runs_and_checks(
    built: dict[str, tuple[MeasureInput, BuildResult]],
) -> None:
    inputs = [i for i, _ in built.values()]
    results = [r for _, r in built.values()]
    number, repeat, min_repeat_ms = Timing.COLD_WEIGHTS.default_settings
    assert (number, repeat, min_repeat_ms) == (1, 10, 0.0)
    with LocalRunner(number, 3, min_repeat_ms, cold_weights=True) as runner:
        assert runner.timing is Timing.COLD_WEIGHTS
        measured = runner.run(inputs, results)
        verdict = runner.check(*built["conv"])
    for result in measured:
        assert result.ok, result.message
        # Seconds per run, each at most its repeat: inside the measurement's time.
        assert len(result.costs) == 3 and all(0 < c < result.all_cost for c in result.costs)
    assert verdict.error is ErrorKind.NONE, verdict.message


def test_the_helper_hands_the_weights_to_the_timer(
    built: dict[str, tuple[MeasureInput, BuildResult]],
) -> None:
    """What the measure helper passes to ember_measure (run here, in this process)."""
    _, conv = built["conv"]
    measurer = Measurer(str(timer_library()))
    timer = measurer._timer._measure
    seen: list[tuple[int, int, list[int], list[int]]] = []

    def recording(*args: object) -> int:
        count, flush, cold, sizes, weights = args[2], args[6], args[7], args[8], args[9]
        seen.append((flush, cold, list(sizes[:count]), list(weights[:count])))  # type: ignore[index]
        return timer(*args)

    measurer._timer._measure = recording
    for cold_weights in (True, False):
        request = TimeRequest(
            str(conv.path), conv.symbol, conv.args, 2, 2, 0.0, False, cold_weights, 0.0
        )
        reply = measurer(request)
        assert reply.error is ErrorKind.NONE and len(reply.costs) == 2, reply.message
    sizes = [int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in conv.args]
    assert seen == [(0, 1, sizes, [0, 1, 1, 0]), (0, 0, sizes, [0, 1, 1, 0])]


def test_faulty_candidates_restart_the_worker(
    built: dict[str, tuple[MeasureInput, BuildResult]], faulty_library: Path
) -> None:
    measure_input, good = built["softmax"]
    candidates = [
        faulty(faulty_library, "null", good),
        good,
        faulty(faulty_library, "spin", good),
        good,
        faulty(faulty_library, "fail", good),
        good,
    ]
    with LocalRunner(min_repeat_ms=5, timeout=HANG_GUARD) as runner:
        results = runner.run([measure_input] * 2, candidates[:2])
        # Only the endless loop meets the short timeout: a good candidate timed out by
        # a busy machine would fail the test, and it must run however slowly.
        runner.timeout = 1.0
        results += runner.run([measure_input], candidates[2:3])
        runner.timeout = HANG_GUARD
        results += runner.run([measure_input] * 3, candidates[3:])
    errors = [r.error for r in results]
    none, runtime = ErrorKind.NONE, ErrorKind.RUNTIME
    expected = [runtime, none, ErrorKind.TIMEOUT, none, runtime, none]
    assert errors == expected, [r.message for r in results]
    assert "SIGSEGV" in results[0].message
    assert "timeout of 1 s" in results[2].message
    assert "error status -1" in results[4].message
    assert all(r.costs[0] > 0 for r in results[1::2])


def test_check_catches_wrong_and_crashing_candidates(
    built: dict[str, tuple[MeasureInput, BuildResult]], faulty_library: Path
) -> None:
    measure_input, good = built["softmax"]
    with LocalRunner(timeout=HANG_GUARD) as runner:
        wrong = runner.check(measure_input, faulty(faulty_library, "wrong", good))
        crash = runner.check(measure_input, faulty(faulty_library, "null", good))
        runner.timeout = 1.0  # for the endless loop only (see above)
        spin = runner.check(measure_input, faulty(faulty_library, "spin", good))
        runner.timeout = HANG_GUARD
        fine = runner.check(measure_input, good)
    assert wrong.error is ErrorKind.WRONG_ANSWER
    assert "elements outside the tolerance" in wrong.message and "abs error" in wrong.message
    assert crash.error is ErrorKind.RUNTIME and "SIGSEGV" in crash.message
    assert spin.error is ErrorKind.TIMEOUT
    assert fine.error is ErrorKind.NONE, fine.message


def test_worker_runs_with_the_tasks_thread_count(
    built: dict[str, tuple[MeasureInput, BuildResult]], faulty_library: Path
) -> None:
    measure_input, good = built["softmax"]
    task = measure_input.task
    threads = faulty(faulty_library, "threads", good)  # returns omp_get_max_threads()
    with LocalRunner(min_repeat_ms=0) as runner:
        for cores in (3, 1):
            params = HardwareParams.for_target(task.target, num_cores=cores)
            other = SearchTask.create(task.compute_dag, task.target, params)
            (result,) = runner.run([MeasureInput(other, measure_input.state)], [threads])
            assert f"error status {cores}" in result.message


def test_failed_builds_and_foreign_targets_are_not_run(
    built: dict[str, tuple[MeasureInput, BuildResult]],
) -> None:
    measure_input, good = built["softmax"]
    failed = BuildResult(None, "", (), ErrorKind.COMPILE, "gcc: error", time_cost=0.5)
    arm = Target("llvm -mtriple=aarch64-linux-gnu")
    remote = MeasureInput(
        SearchTask.create(measure_input.task.compute_dag, arm), measure_input.state
    )
    with LocalRunner() as runner:
        compile_error, foreign = runner.run([measure_input, remote], [failed, good])
        assert runner._slot.worker is None  # nothing was run
    assert (compile_error.error, compile_error.message) == (ErrorKind.COMPILE, "gcc: error")
    assert compile_error.all_cost == 0.5
    assert foreign.error is ErrorKind.RUNTIME and "does not run on this machine" in foreign.message


def test_reference_arguments() -> None:
    args = (
        ArgSpec((4, 8), "float32", False),
        ArgSpec((4, 8), "float32", False),
        ArgSpec((5,), "int64", False),
        ArgSpec((6,), "int8", False),
        ArgSpec((4, 8), "float32", True),
    )
    first, second, indices, quantized, out = reference_arguments(args)
    again = reference_arguments(args)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(again, [first, second, indices, quantized, out], strict=True)
    )
    assert not np.array_equal(first, second)  # swapped arguments must show
    assert first.min() >= -1 and first.max() <= 1 and first.dtype == np.float32
    assert not indices.any()  # in bounds for any index-reading kernel
    assert quantized.min() >= -8 and quantized.max() <= 8
    assert not out.any() and all(a.ctypes.data % 64 == 0 for a in again)


def test_compare_outputs_tolerance() -> None:
    reference = np.linspace(-10, 10, 100, dtype=np.float32).reshape(10, 10)
    assert compare_outputs([reference * np.float32(1 + 1e-6)], [reference], 1000) == ""
    nan = reference.copy()
    nan[3, 4] = np.nan
    assert "worst at (3, 4)" in compare_outputs([nan], [reference], 1000)
    assert compare_outputs([nan], [nan], 1000) == ""  # NaN where expected is fine
    off = reference.copy()
    off[1, 2] += 0.25  # a dropped reduction term
    assert "worst at (1, 2)" in compare_outputs([off], [reference], 1000)
    integers = np.arange(6, dtype=np.int32)
    assert "first at (5,)" in compare_outputs([integers + (integers == 5)], [integers], 1)


def test_integer_outputs_of_rounded_transcendentals_may_flip_a_step() -> None:
    """A quantized sigmoid's outputs may be one apart in one element per thousand (the
    vector sigmoid and NumPy's differ in the last bit); more, or further, is wrong. A
    DAG that only rounds arithmetic must match exactly."""
    reference = np.arange(4000, dtype=np.int32) % 256
    flipped = reference.copy()
    flipped[[7, 300, 2999]] += 1
    assert compare_outputs([flipped], [reference], 1, step_flips=True) == ""
    assert "differ" in compare_outputs([flipped], [reference], 1)
    far = reference.copy()
    far[7] += 2
    assert "differ" in compare_outputs([far], [reference], 1, step_flips=True)
    many = reference + (reference % 100 == 0)
    assert "differ" in compare_outputs([many], [reference], 1, step_flips=True)
    x = te.placeholder((8,), "float32", name="x")
    sigmoid = te.compute((8,), lambda i: te.cast("uint8", te.call("round", te.call(
        "sigmoid", x[i]) * 255)), name="q")  # fmt: skip
    rounded = te.compute((8,), lambda i: te.cast("int32", te.call("round", x[i] * 3)), name="r")
    assert rounds_inexact_floats(te.ComputeDAG([sigmoid]))
    assert not rounds_inexact_floats(te.ComputeDAG([rounded]))


def test_rejects_bad_settings() -> None:
    with pytest.raises(MeasureError, match="number"):
        LocalRunner(number=0)
    with pytest.raises(MeasureError, match="min_repeat_ms"):
        LocalRunner(min_repeat_ms=float("nan"))
    with pytest.raises(MeasureError, match="timeout"):
        LocalRunner(timeout=-1)
    with pytest.raises(MeasureError, match="choose one"):
        LocalRunner(enable_cpu_cache_flush=True, cold_weights=True)
    assert LocalRunner(enable_cpu_cache_flush=True).timing is Timing.COLD
    assert LocalRunner().timing is Timing.WARM

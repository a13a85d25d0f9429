"""A real tuning run (LocalBuilder + LocalRunner) killed with SIGKILL mid-run leaves a
log that loads, and a second run given that log measures none of its states again;
a crashing candidate does not stop a tuning run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from ember.autoschedule import ErrorKind, load_records
from ember.autoschedule.measure import BuildResult, MeasureInput, MeasureResult
from ember.autoschedule.records import state_key, steps_key
from ember.autoschedule.search import SearchParams
from ember.autoschedule.tuning import TuningOptions, tune_task

# Builds the same small task in the child and here (workload keys are stable).
TASK_SOURCE = """
from ember import te
from ember.autoschedule import SearchTask

def small_task():
    data = te.placeholder((16, 24), name="data")
    weight = te.placeholder((32, 24), name="weight")
    rk = te.reduce_axis(24, "k")
    dense = te.compute(
        (16, 32), lambda i, j: te.reduce_sum(data[i, rk] * weight[j, rk], rk), name="T_dense"
    )
    out = te.compute((16, 32), lambda i, j: te.maximum(dense[i, j], 0.0), name="T_relu")
    return SearchTask.create(te.ComputeDAG([out]), "llvm", desc="dense_relu")
"""

CHILD = (
    TASK_SOURCE
    + """
import sys
from ember.autoschedule import RecordToFile
from ember.autoschedule.builder import LocalBuilder
from ember.autoschedule.runner import LocalRunner
from ember.autoschedule.search import SearchParams
from ember.autoschedule.tuning import TuningOptions, tune_task

options = TuningOptions(
    num_measure_trials=10_000,
    num_measures_per_round=4,
    builder=LocalBuilder(n_parallel=1),
    runner=LocalRunner(number=1, min_repeat_ms=1),
    measure_callbacks=[RecordToFile(sys.argv[1])],
    verbose=0,
)
tune_task(small_task(), options, search_params=SearchParams(population=16, generations=1), seed=0)
"""
)

# The timeout of a runner whose candidates finish: a guard against a hang, not a limit
# that a slow machine could reach.
HANG_GUARD = 600.0

namespace: dict[str, object] = {}
exec(TASK_SOURCE, namespace)
small_task = namespace["small_task"]


def test_a_killed_run_leaves_a_log_the_next_run_resumes_from(tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(log)], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if log.exists() and log.read_bytes().count(b"\n") >= 8:
                break
            time.sleep(0.05)
        assert child.poll() is None, "the tuning run ended before it was killed"
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    records = load_records(log)  # a line cut by the kill is skipped with a warning
    assert len(records) >= 8
    measured = {steps_key(r.steps) for r in records}

    class RecordingBuilder:
        def __init__(self) -> None:
            self.keys: list[str] = []

        def build(
            self, inputs: Sequence[MeasureInput], known_code: Collection[str] | None = None
        ) -> list[BuildResult]:
            self.keys += [state_key(i.state) for i in inputs]
            return [BuildResult("/nonexistent.so", "k_packed", ()) for _ in inputs]

    class ConstantRunner:
        def run(self, inputs, build_results):  # type: ignore[no-untyped-def]
            return [MeasureResult((1.0,)) for _ in inputs]

        def check(self, measure_input, build_result):  # type: ignore[no-untyped-def]
            return MeasureResult(())

    builder = RecordingBuilder()
    options = TuningOptions(
        num_measure_trials=24,
        num_measures_per_round=8,
        builder=builder,
        runner=ConstantRunner(),
        verbose=0,
    )
    result = tune_task(
        small_task(),  # type: ignore[operator]
        options,
        search_params=SearchParams(population=16, generations=1),
        seed=0,  # the same seed: without the log it would propose the same states
        load_log_file=log,
    )
    assert len(builder.keys) == 24
    assert not measured & set(builder.keys)
    # The loaded records' best (seconds) beats the constant 1 s of the new ones.
    assert result.best_cost == min(r.median_cost for r in records)


def test_crashing_and_hanging_candidates_do_not_stop_the_run(tmp_path: Path) -> None:
    """Real measurement, with the runner's worker killed by a crashing candidate and a
    hanging one mid-run (injected by wrapping the builder's results)."""
    from ember.autoschedule.builder import LocalBuilder
    from ember.autoschedule.runner import LocalRunner
    from ember.toolchain import compile_shared

    faulty = compile_shared(
        [
            "#include <stdint.h>\n"
            "int32_t crash_packed(void* const* a, int32_t n) { *(volatile int*)0 = 1; return 0; }\n"
            "int32_t hang_packed(void* const* a, int32_t n) { for (;;) {} return 0; }\n"
        ],
        "llvm",
    )

    class FaultyBuilder:
        """Turns the first two candidates of the first round into a crash and a hang."""

        def __init__(self) -> None:
            self.inner = LocalBuilder(n_parallel=1)
            self.rounds = 0

        def build(
            self, inputs: Sequence[MeasureInput], known_code: Collection[str] | None = None
        ) -> list[BuildResult]:
            results = self.inner.build(inputs, known_code)
            self.rounds += 1
            if self.rounds == 1:
                for index, symbol in ((0, "crash_packed"), (1, "hang_packed")):
                    copy = Path(self.inner.directory) / f"faulty{index}.so"
                    copy.write_bytes(Path(faulty).read_bytes())
                    results[index] = BuildResult(str(copy), symbol, results[index].args)
            return results

    class ShortTimeoutForTheHang:
        """The LocalRunner, its 1 s timeout only for the hanging candidate: a good
        candidate must not time out however busy the machine is."""

        def __init__(self) -> None:
            self.inner = LocalRunner(number=1, min_repeat_ms=1, timeout=HANG_GUARD)

        def run(
            self, inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]
        ) -> list[MeasureResult]:
            results = []
            for measure_input, built in zip(inputs, build_results, strict=True):
                self.inner.timeout = 1.0 if built.symbol == "hang_packed" else HANG_GUARD
                results += self.inner.run([measure_input], [built])
            return results

        def check(self, measure_input: MeasureInput, built: BuildResult) -> MeasureResult:
            self.inner.timeout = HANG_GUARD
            return self.inner.check(measure_input, built)

    builder = FaultyBuilder()
    runner = ShortTimeoutForTheHang()
    records = []
    try:
        result = tune_task(
            small_task(),  # type: ignore[operator]
            TuningOptions(
                num_measure_trials=8,
                num_measures_per_round=4,
                builder=builder,
                runner=runner,
                measure_callbacks=[records.extend],
                verbose=0,
            ),
            search_params=SearchParams(population=16, generations=1),
            seed=0,
        )
    finally:
        runner.inner.close()
        builder.inner.close()
    errors = [r.result.error for r in records]
    assert errors[:2] == [ErrorKind.RUNTIME, ErrorKind.TIMEOUT]
    assert "SIGSEGV" in records[0].result.message
    # The other six (the restarted worker's among them) are measured.
    assert len(records) == 8 and all(r.is_valid for r in records[2:]), errors
    assert result.best_state is not None

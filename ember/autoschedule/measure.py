"""What a measurement passes around: candidates in, build results, timings out.

    builder, runner = LocalBuilder(), LocalRunner()
    inputs = [MeasureInput(task, state) for state in candidates]
    built = builder.build(inputs)                 # never raises for a bad candidate:
    results = runner.run(inputs, built)           #   errors are results (ErrorKind)
    records = [to_record(i, r) for i, r in zip(inputs, results)]
    release(built)                                # the compiled candidates' files

A builder turns each candidate State into a shared library exporting the packed entry
of its kernel (`ember.codegen.c.entry_symbols`); a runner times that entry on the
device. Both are behind small protocols so a remote runner (an RPC device farm) plugs
into the same tuning loop. The implementations live in `ember.autoschedule.builder`
and `ember.autoschedule.runner`; `Timing` names what a runner leaves in the CPU caches
when a timed run starts.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from ember.autoschedule.records import (
    ErrorKind,
    MeasureRecord,
    RecordResult,
    RecordTask,
    median_seconds,
)
from ember.autoschedule.task import SearchTask
from ember.schedule.state import State
from ember.schedule.steps import Step
from ember.toolchain import compiler_identity


@dataclass(frozen=True, slots=True)
class MeasureInput:
    """One candidate: a State of `task`'s DAG."""

    task: SearchTask
    state: State


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One buffer argument of a compiled candidate, in call order. `is_weight`: one of
    the task's constant params (`SearchTask.weight_inputs`)."""

    shape: tuple[int, ...]
    dtype: str
    is_output: bool
    is_weight: bool = False


class Timing(Enum):
    """What is in the CPU caches when a candidate's timed run starts."""

    # Everything the kernel touched in the run before: runs repeated in a loop.
    WARM = "warm"
    # All but its weights, evicted to memory before each run: a kernel in a network
    # (its input just written by the previous kernel, the weights streamed).
    COLD_WEIGHTS = "cold-weights"
    # Nothing: the last-level cache flushed before each timed batch (TVM's
    # enable_cpu_cache_flush).
    COLD = "cold"

    @property
    def default_settings(self) -> tuple[int, int, float]:
        """A runner's (number, repeat, min_repeat_ms) for this timing: warm, the median
        of 5 repeats, each grown to 5 ms; cold, 10 single calls, each timed after its
        eviction."""
        # Warm was one 100 ms repeat (TVM's LocalRunner defaults, still LocalRunner's),
        # 112-117 ms a candidate: ~40% of a 2,000-trial run. Five 5 ms repeats take
        # 45 ms and agree with themselves from one pass to the next as well
        # (BENCHMARKS.md, issue 19, seventh session).
        return (1, 5, 5.0) if self is Timing.WARM else (1, 10, 0.0)


@dataclass(frozen=True, slots=True)
class BuildResult:
    """A compiled candidate (`path` to its shared library, the packed entry `symbol`,
    its arguments) or why there is none (`error`, `message`). `time_cost`: seconds the
    build took. `code_key`: a digest of its generated source (empty where none was
    rendered); `duplicate`: not compiled, because that code was known or came earlier
    in the batch (`ember.autoschedule.builder`): its measurement is that code's."""

    path: str | None
    symbol: str
    args: tuple[ArgSpec, ...]
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    time_cost: float = 0.0
    code_key: str = ""
    duplicate: bool = False

    @property
    def ok(self) -> bool:
        return self.error is ErrorKind.NONE and self.path is not None


@dataclass(frozen=True, slots=True)
class MeasureResult:
    """Seconds per run of a candidate (one per repeat), or why there are none.
    `all_cost`: seconds spent building and running it."""

    costs: tuple[float, ...]
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    all_cost: float = 0.0
    timestamp: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.error is ErrorKind.NONE and bool(self.costs)

    @property
    def median_cost(self) -> float:
        """Median seconds per run (see `median_seconds`); infinity for an error."""
        return median_seconds(self.costs) if self.ok else float("inf")


class Builder(Protocol):
    """Compiles candidates; a bad candidate becomes an error result, never an exception."""

    def build(
        self, inputs: Sequence[MeasureInput], known_code: Collection[str] | None = None
    ) -> list[BuildResult]:
        """One result per input. Given `known_code`, a candidate whose code (its
        `code_key`) is in it, or repeats an earlier candidate's, may come back a
        `duplicate` instead of compiled."""
        ...


class Runner(Protocol):
    """Times compiled candidates on the device, and checks a candidate's output."""

    def run(
        self, inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]
    ) -> list[MeasureResult]: ...

    def check(self, measure_input: MeasureInput, build_result: BuildResult) -> MeasureResult:
        """Run the candidate once on the task's reference inputs and compare its
        outputs with the reference evaluation of the DAG: a result with error NONE
        when they agree, WRONG_ANSWER (or RUNTIME / TIMEOUT) otherwise."""
        ...


def record_task(task: SearchTask, weight: int | None = None) -> RecordTask:
    """The record's identity of `task` (and its weight in the network, if known)."""
    hardware = tuple(sorted(task.hardware_params.to_json().items()))
    return RecordTask(task.workload_key, str(task.target), hardware, task.flop_count, weight)


def to_record(
    measure_input: MeasureInput, result: MeasureResult, weight: int | None = None
) -> MeasureRecord:
    """The tuning record of one measurement."""
    steps: tuple[Step, ...] = tuple(measure_input.state.steps)  # type: ignore[arg-type]
    return MeasureRecord(
        record_task(measure_input.task, weight),
        steps,
        RecordResult(
            result.costs,
            result.error,
            result.message,
            result.timestamp,
            compiler=compiler_identity(measure_input.task.target),
        ),
    )


def release(build_results: Sequence[BuildResult]) -> None:
    """Delete the compiled candidates' files (after they ran and were checked)."""
    for result in build_results:
        if result.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(result.path)

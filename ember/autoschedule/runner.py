"""`LocalRunner`: times compiled candidates on this machine, safely.

    with LocalRunner(number=3, repeat=1, min_repeat_ms=100, timeout=10) as runner:
        results = runner.run(inputs, builder.build(inputs))
        verdict = runner.check(inputs[0], built[0])   # vs the DAG's NumPy reference

Candidates run in one long-lived helper process (`measure_worker`), never in the
tuner's: a candidate that segfaults or aborts becomes a RUNTIME result naming the
signal, one that runs past `timeout` seconds a TIMEOUT result; either way the helper
is killed, reaped and started again for the next candidate. The helper loads the
candidate's library, and a C loop (`c/measure.c`, the timing loop of the runtime's
`ember_benchmark`) calls its packed entry: a warm-up call, then `repeat` repeats of
`number` calls, `number` growing until a repeat lasts `min_repeat_ms`, and
`cooldown_interval` seconds of sleep between repeats. What the caches hold when a timed
call starts (`Timing`):

- warm (the default): whatever the call before left there;
- `cold_weights`: the same, except the kernel's weight arguments (`ArgSpec.is_weight`:
  the task's constant params), evicted to memory before every call, untimed; each call
  is timed on its own (so every timed call is a cold one, whatever `number`);
- `enable_cpu_cache_flush`: nothing; the last-level cache is flushed before each timed
  batch (use number=1: the flush only reaches a batch's first call).

`timing` tells which (`Timing.default_settings`: number, repeat, min_repeat_ms to go
with it); asking for both cold modes is an error.

Inputs are `reference_arguments` (see `ember.autoschedule.reference`), made once per
argument list and reused for every candidate of a task. OpenMP kernels run with the
task's `hardware_params.num_cores` threads: OMP_NUM_THREADS is fixed when the helper
starts, so a task that wants another count restarts it.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Self

import numpy as np

from ember.autoschedule.measure import ArgSpec, BuildResult, MeasureInput, MeasureResult, Timing
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.reference import (
    compare_outputs,
    reduction_length,
    reference_arguments,
    rounds_inexact_floats,
)
from ember.autoschedule.task import SearchTask
from ember.autoschedule.worker import Worker, WorkerCrashed, WorkerTimedOut
from ember.errors import EmberError
from ember.runtime.aot import timing_header
from ember.target import host_triple
from ember.te.evaluate import evaluate_dag
from ember.toolchain import compile_shared

WORKER_MODULE = "ember.autoschedule.measure_worker"
# clock_gettime and nanosleep need POSIX under -std=c11, before any system header.
_FEATURES = "#define _POSIX_C_SOURCE 200809L\n"


class MeasureError(EmberError):
    """Measurement settings a runner cannot use."""


@dataclass(frozen=True, slots=True)
class TimeRequest:
    """Time the packed entry `symbol` of the library at `path` (to the worker)."""

    path: str
    symbol: str
    args: tuple[ArgSpec, ...]
    number: int
    repeat: int
    min_repeat_ms: float
    flush_cache: bool
    cold_weights: bool
    cooldown_ms: float


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """Run the entry once on the reference arguments and send the outputs back."""

    path: str
    symbol: str
    args: tuple[ArgSpec, ...]


@dataclass(frozen=True, slots=True)
class WorkerReply:
    """The worker's answer: seconds per run per repeat, or the outputs of a check, or
    why neither."""

    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    costs: tuple[float, ...] = ()
    outputs: tuple[np.ndarray, ...] = ()


def timer_source() -> str:
    """`c/measure.c` with what Ember prepends to it (the timing loop)."""
    source = resources.files("ember.autoschedule").joinpath("c", "measure.c")
    return _FEATURES + timing_header() + source.read_text(encoding="utf-8")


def timer_library() -> Path:
    """The compiled `c/measure.c` (through the toolchain's content-hash cache)."""
    return compile_shared([timer_source()], "llvm")


class TimingRunner:
    """What every runner shares: the timing settings, `run` (one candidate after the
    other), `check` against the DAG's reference evaluation. Subclasses say where a
    request runs (`_call`) and what keeps a candidate from running there
    (`_cannot_run`)."""

    def __init__(
        self,
        number: int = 3,
        repeat: int = 1,
        min_repeat_ms: float = 100.0,
        timeout: float = 10.0,
        enable_cpu_cache_flush: bool = False,
        cooldown_interval: float = 0.0,
        cold_weights: bool = False,
    ) -> None:
        _check_settings(number, repeat, min_repeat_ms, timeout, cooldown_interval)
        if enable_cpu_cache_flush and cold_weights:
            raise MeasureError(
                "enable_cpu_cache_flush and cold_weights are two timings: the first evicts "
                "everything, the second only the weights; choose one"
            )
        self.number = number
        self.repeat = repeat
        self.min_repeat_ms = float(min_repeat_ms)
        self.timeout = float(timeout)
        self.enable_cpu_cache_flush = enable_cpu_cache_flush
        self.cold_weights = cold_weights
        self.cooldown_interval = float(cooldown_interval)
        self._references: dict[tuple[str, tuple[ArgSpec, ...]], list[np.ndarray]] = {}
        self._open()

    def _open(self) -> None:
        """Set up what the subclass holds (called at the end of __init__)."""

    @staticmethod
    def timing_settings(
        timing: Timing,
        number: int | None = None,
        repeat: int | None = None,
        min_repeat_ms: float | None = None,
    ) -> dict[str, Any]:
        """A runner's keyword settings for `timing`, with the timing's default settings
        (`Timing.default_settings`) for those not given."""
        default_number, default_repeat, default_min_repeat_ms = timing.default_settings
        return {
            "number": default_number if number is None else number,
            "repeat": default_repeat if repeat is None else repeat,
            "min_repeat_ms": default_min_repeat_ms if min_repeat_ms is None else min_repeat_ms,
            "enable_cpu_cache_flush": timing is Timing.COLD,
            "cold_weights": timing is Timing.COLD_WEIGHTS,
        }

    def set_timing(
        self,
        timing: Timing,
        number: int | None = None,
        repeat: int | None = None,
        min_repeat_ms: float | None = None,
    ) -> None:
        """Time the next candidates as `timing` says, with its default settings for
        those not given (what `for_timing` does for a new runner)."""
        settings = self.timing_settings(timing, number, repeat, min_repeat_ms)
        _check_settings(
            settings["number"], settings["repeat"], settings["min_repeat_ms"], self.timeout,
            self.cooldown_interval,
        )  # fmt: skip
        self.number, self.repeat = settings["number"], settings["repeat"]
        self.min_repeat_ms = float(settings["min_repeat_ms"])
        self.enable_cpu_cache_flush = settings["enable_cpu_cache_flush"]
        self.cold_weights = settings["cold_weights"]

    @property
    def timing(self) -> Timing:
        """What the caches hold when a timed call starts (see the module docstring)."""
        if self.enable_cpu_cache_flush:
            return Timing.COLD
        return Timing.COLD_WEIGHTS if self.cold_weights else Timing.WARM

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release what the runner holds (helper processes, boards)."""

    def run(
        self, inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]
    ) -> list[MeasureResult]:
        """One result per candidate, in order; never raises for a bad candidate."""
        _check_lengths(inputs, build_results)
        return [self._time(i, b) for i, b in zip(inputs, build_results, strict=True)]

    def check(self, measure_input: MeasureInput, build_result: BuildResult) -> MeasureResult:
        """Run the candidate once on the reference arguments and compare its outputs
        with `evaluate_dag` of the task's DAG (tolerance: `ember.autoschedule.reference`).
        costs=() and error NONE when they agree; WRONG_ANSWER, RUNTIME or TIMEOUT not."""
        start = time.monotonic()
        task = measure_input.task
        problem = self._cannot_run(task, build_result) or _argument_mismatch(
            task, build_result.args
        )
        if problem is not None:
            return _result(problem, 0.0)
        args = build_result.args
        reply = self._call(task, CheckRequest(str(build_result.path), build_result.symbol, args))
        if reply.error is ErrorKind.NONE:
            references = self._reference(task, args)
            dag = task.compute_dag
            message = compare_outputs(
                reply.outputs, references, reduction_length(dag), rounds_inexact_floats(dag)
            )
            if message:
                reply = WorkerReply(ErrorKind.WRONG_ANSWER, message)
        return MeasureResult((), reply.error, reply.message, time.monotonic() - start)

    def _time(self, measure_input: MeasureInput, built: BuildResult) -> MeasureResult:
        start = time.monotonic()
        problem = self._cannot_run(measure_input.task, built)
        if problem is not None:
            return _result(problem, built.time_cost)
        request = TimeRequest(
            str(built.path),
            built.symbol,
            built.args,
            self.number,
            self.repeat,
            self.min_repeat_ms,
            self.enable_cpu_cache_flush,
            self.cold_weights,
            self.cooldown_interval * 1e3,
        )
        reply = self._call(measure_input.task, request)
        return _result(reply, built.time_cost + time.monotonic() - start)

    def _cannot_run(self, task: SearchTask, built: BuildResult) -> WorkerReply | None:
        """Why the candidate is not run: its build failed."""
        return None if built.ok else WorkerReply(built.error, built.message)

    def _call(self, task: SearchTask, request: TimeRequest | CheckRequest) -> WorkerReply:
        raise NotImplementedError

    def _reference(self, task: SearchTask, args: tuple[ArgSpec, ...]) -> list[np.ndarray]:
        key = (task.workload_key, args)
        if key not in self._references:
            arrays = reference_arguments(args)
            inputs = [a for a, spec in zip(arrays, args, strict=True) if not spec.is_output]
            self._references[key] = evaluate_dag(task.compute_dag, inputs)
        return self._references[key]


class LocalRunner(TimingRunner):
    """Times candidates in a helper process on this machine; see the module docstring.
    Close it (or use it as a context manager) to stop the helper; it is also stopped
    when the runner is garbage-collected or the interpreter exits."""

    def _open(self) -> None:
        self._slot = _WorkerSlot()
        self._finalizer = weakref.finalize(self, self._slot.stop)

    @classmethod
    def for_timing(
        cls,
        timing: Timing,
        number: int | None = None,
        repeat: int | None = None,
        min_repeat_ms: float | None = None,
        timeout: float = 10.0,
    ) -> LocalRunner:
        """A runner that times as `timing` says, with the timing's default settings
        (`Timing.default_settings`) for those not given."""
        settings = cls.timing_settings(timing, number, repeat, min_repeat_ms)
        return cls(timeout=timeout, **settings)

    def close(self) -> None:
        """Stop the helper process (a later run starts a new one)."""
        self._slot.stop()

    def _cannot_run(self, task: SearchTask, built: BuildResult) -> WorkerReply | None:
        """Why the candidate is not run here: its build failed, or its target is not
        this machine."""
        failed = super()._cannot_run(task, built)
        if failed is not None:
            return failed
        if not task.target.is_host:
            return WorkerReply(
                ErrorKind.RUNTIME,
                f"target {task.target} does not run on this machine ({host_triple()}); "
                "LocalRunner only measures host targets: use a remote runner for the device",
            )
        return None

    def _call(self, task: SearchTask, request: TimeRequest | CheckRequest) -> WorkerReply:
        worker = self._slot.worker_for(task.hardware_params.num_cores)
        worker.send(request)
        try:
            reply = worker.receive(self.timeout)
        except WorkerTimedOut:
            self._slot.forget()
            return WorkerReply(
                ErrorKind.TIMEOUT,
                f"the candidate did not finish within the runner's timeout of {self.timeout:g} "
                "s (its process was killed and restarted)",
            )
        except WorkerCrashed as crash:
            self._slot.forget()
            return WorkerReply(
                ErrorKind.RUNTIME, f"the candidate crashed its process: {crash.reason}"
            )
        except BaseException:
            # Interrupted (Ctrl-C): its late reply must not answer the next request.
            self._slot.stop()
            raise
        assert isinstance(reply, WorkerReply)
        return reply


class _WorkerSlot:
    """The runner's helper process, started on demand for a thread count."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.threads = 0

    def worker_for(self, threads: int) -> Worker:
        if self.worker is not None and self.threads != threads:
            self.stop()
        if self.worker is None:
            env = {"OMP_NUM_THREADS": str(threads)}
            self.worker = Worker(WORKER_MODULE, env, [str(timer_library())])
            self.threads = threads
            self.worker.wait_ready()
        return self.worker

    def forget(self) -> None:
        """The helper died or was killed (and reaped): the next call starts another."""
        self.worker = None

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def _check_settings(
    number: int, repeat: int, min_repeat_ms: float, timeout: float, cooldown: float
) -> None:
    if not (1 <= number < 2**31 and 1 <= repeat < 2**31):
        raise MeasureError(
            f"number={number} and repeat={repeat} must be between 1 and 2**31-1 (runs per "
            "repeat and repeats per candidate)"
        )
    for name, value in (("min_repeat_ms", min_repeat_ms), ("cooldown_interval", cooldown)):
        if not (math.isfinite(value) and value >= 0):
            raise MeasureError(f"{name}={value} must be a finite number >= 0")
    if not (math.isfinite(timeout) and timeout > 0):
        raise MeasureError(f"timeout={timeout} must be a positive number of seconds")


def _argument_mismatch(task: SearchTask, args: Sequence[ArgSpec]) -> WorkerReply | None:
    """The compared outputs are only meaningful if the kernel takes the DAG's inputs,
    then its outputs, in order (as `lower` promises)."""
    dag = task.compute_dag
    expected = [(tuple(t.shape), t.dtype, False) for t in dag.inputs]
    expected += [(tuple(t.shape), t.dtype, True) for t in dag.outputs]
    actual = [(a.shape, a.dtype, a.is_output) for a in args]
    if actual == expected:
        return None
    return WorkerReply(
        ErrorKind.WRONG_ANSWER,
        f"the candidate's arguments {actual} (shape, dtype, is output) are not the DAG's "
        f"inputs then outputs {expected}",
    )


def _check_lengths(inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]) -> None:
    if len(inputs) != len(build_results):
        raise MeasureError(
            f"run() got {len(inputs)} inputs but {len(build_results)} build results; "
            "pass the builder's results for exactly these inputs"
        )


def _result(reply: WorkerReply, seconds: float) -> MeasureResult:
    return MeasureResult(reply.costs, reply.error, reply.message, seconds)

"""Tuning one task: search, build, run, check, log; round after round.

    log = "conv.json"
    options = TuningOptions(num_measure_trials=200, measure_callbacks=[RecordToFile(log)])
    result = tune_task(task, options)
    state = apply_best(task, log)                  # the fastest valid State in the log

A round asks the search for `num_measures_per_round` unmeasured states, compiles them
(`Builder`), times them on the device (`Runner`), checks each candidate that would
become the task's best against the reference evaluation of its DAG (a wrong one is
logged as WRONG_ANSWER and never used), hands the round's records to the callbacks
(`RecordToFile` makes them durable before the next round starts, so a killed run
loses at most the round in flight), and teaches the cost model. `TaskTuner` holds one
task's history so that the multi-task scheduler can drive many tasks round by round.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ember.autoschedule.builder import LocalBuilder
from ember.autoschedule.cost_model import CostModel, RandomModel
from ember.autoschedule.measure import (
    Builder,
    BuildResult,
    MeasureInput,
    MeasureResult,
    Runner,
    Timing,
    release,
    to_record,
)
from ember.autoschedule.records import (
    ErrorKind,
    MeasureRecord,
    compiler_family,
    load_best,
    load_records,
    median_seconds,
    steps_key,
)
from ember.autoschedule.runner import LocalRunner
from ember.autoschedule.search import EvolutionarySearch, SearchParams
from ember.autoschedule.task import SearchTask
from ember.errors import EmberError
from ember.schedule.default import default_schedule
from ember.schedule.state import ScheduleError, State
from ember.schedule.steps import replay
from ember.toolchain import compiler_identity

MeasureCallback = Callable[[Sequence[MeasureRecord]], None]
# A challenger of a task's best and the best, timed in turn this many times each (each
# warm timing lasted 100 ms when two pairs made checking new bests 25% of a run).
BESIDE_BEST_PAIRS = 1
# A best timed beside a challenger this many times faster or slower than its record
# may have been disturbed (a stall), not drifted: scaling the challenger by such a
# timing recorded a ResNet-18 conv at 2.8x this machine's FMA peak, a best nothing
# could beat. Such a pair is timed once more: the second scale counts if it is within
# this, or within PAIR_AGREEMENT of the first (the machine's speed did change); else
# the challenger's costs are kept as timed.
MAX_PAIR_DRIFT = 1.5
PAIR_AGREEMENT = 1.25


class TuningError(EmberError):
    """Bad tuning options, or a log without a usable record for the task."""


# Kernels timed as a network runs them: weights evicted, inputs cached (BENCHMARKS.md:
# warm timing flatters weight-streaming layers, cold timing misranks the others).
DEFAULT_TIMING = Timing.COLD_WEIGHTS


@dataclass(frozen=True)
class TuningOptions:
    """How long and how to tune. `early_stopping`: stop a task after this many trials
    without a new best (None: never). `builder` / `runner`: a LocalBuilder and
    LocalRunner with default settings when None (created and closed by the call);
    `timing`: how that LocalRunner times candidates (with `Timing.default_settings`;
    None: `DEFAULT_TIMING`). To time another way with your own runner, configure the
    runner."""

    num_measure_trials: int = 64
    num_measures_per_round: int = 16
    early_stopping: int | None = None
    builder: Builder | None = None
    runner: Runner | None = None
    measure_callbacks: Sequence[MeasureCallback] = ()
    verbose: int = 1
    timing: Timing | None = None

    def __post_init__(self) -> None:
        for name in ("num_measure_trials", "num_measures_per_round"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise TuningError(f"TuningOptions.{name} must be a positive integer, not {value!r}")
        if self.early_stopping is not None and self.early_stopping < 1:
            raise TuningError(
                "TuningOptions.early_stopping must be None or positive, "
                f"not {self.early_stopping!r}"
            )
        if self.timing is not None and not isinstance(self.timing, Timing):
            raise TuningError(
                f"TuningOptions.timing must be a Timing ({', '.join(map(str, Timing))}), "
                f"not {self.timing!r}"
            )
        if self.runner is not None and self.timing is not None:
            raise TuningError(
                f"TuningOptions.timing={self.timing} applies to the LocalRunner the tuner "
                "makes when runner is None; set the timing on the runner you pass instead "
                "(e.g. LocalRunner(cold_weights=True))"
            )


@dataclass
class TuningStats:
    """Where a task's tuning time went, in seconds, and what the trials gave."""

    search: float = 0.0
    build: float = 0.0
    run: float = 0.0
    check: float = 0.0
    trials: int = 0
    # Trials whose code was that of a candidate measured before: not compiled or
    # run, that measurement reused.
    same_code: int = 0
    errors: Counter[ErrorKind] = field(default_factory=Counter)

    @property
    def total(self) -> float:
        return self.search + self.build + self.run + self.check


@dataclass(frozen=True, slots=True)
class TuneResult:
    """The best state found (None when no candidate was valid) and its mean cost."""

    task: SearchTask
    best_state: State | None
    best_cost: float
    stats: TuningStats

    @property
    def best_gflops(self) -> float:
        return self.task.flop_count / self.best_cost / 1e9 if self.best_state else 0.0


class TaskTuner:
    """One task's search and measured history, advanced one round at a time."""

    def __init__(
        self,
        task: SearchTask,
        cost_model: CostModel | None = None,
        search_params: SearchParams | None = None,
        seed: int | None = None,
        include_default_schedule: bool = True,
        weight: int | None = None,
    ) -> None:
        self.task = task
        self.weight = weight  # written into the records (see RecordTask.weight)
        self.cost_model: CostModel = cost_model or RandomModel(seed)
        # The default schedule joins the first population: tuning starts from the
        # untuned speed and mutates it, as well as searching from scratch.
        seeds = (
            [default_schedule(task.compute_dag, task.target)] if include_default_schedule else []
        )
        self.search = EvolutionarySearch(task, self.cost_model, search_params, seed, seeds)
        self.best_state: State | None = None
        self.best_cost = math.inf
        # The best's compiled library, kept to time challengers beside it (released when
        # a challenger wins; the builder's directory goes with the builder).
        self._best_built: BuildResult | None = None
        self._best_builder: Builder | None = None  # whose directory holds it
        self.trials = 0
        self.trials_since_improvement = 0
        self.stats = TuningStats()
        # This run's successful measurements by code (`BuildResult.code_key`): a
        # candidate rendering the same code is neither compiled nor run again.
        self._code_results: dict[str, MeasureResult] = {}

    def load(self, records: Iterable[MeasureRecord]) -> int:
        """Take the task's records from an earlier run: those states are not measured
        again, the best valid one is the best so far, the model learns from them.
        Records measured with another compiler family than the one that builds now
        (`compiler_family`) only teach the model: their times say how that compiler's
        code ran, so their states may be measured again and none is the best so far.
        Returns how many records matched the task."""
        building_with = compiler_identity(self.task.target)
        family = compiler_family(building_with) if building_with else None
        inputs: list[MeasureInput] = []
        results: list[MeasureResult] = []
        for record in records:
            if record.task.workload_key != self.task.workload_key or record.task.target != str(
                self.task.target
            ):
                continue
            if not record.is_trial:  # an in-network time: not comparable with trials
                continue
            measured_here = family is None or compiler_family(record.result.compiler) == family
            try:
                state = replay(self.task.compute_dag, record.steps)
            except ScheduleError:
                self.search.mark_measured([steps_key(record.steps)])
                continue
            result = MeasureResult(record.result.costs, record.result.error, record.result.message)
            inputs.append(MeasureInput(self.task, state))
            results.append(result)
            if not measured_here:
                continue
            self.search.record_measured([state], [result.median_cost])
            self.trials += 1  # the task's trials in all runs (`stats`: this run's)
            if result.ok and result.median_cost < self.best_cost:
                self.best_state, self.best_cost = state, result.median_cost
        if inputs:
            self.cost_model.update(inputs, results)
        return len(inputs)

    def round(
        self, count: int, builder: Builder, runner: Runner, callbacks: Sequence[MeasureCallback]
    ) -> list[MeasureRecord]:
        """Measure up to `count` new states; returns their records (empty when the
        search space is exhausted)."""
        started = time.perf_counter()
        states = self.search.next_batch(count)
        self.stats.search += time.perf_counter() - started
        if not states:
            return []
        inputs = [MeasureInput(self.task, state) for state in states]
        started = time.perf_counter()
        built = builder.build(inputs, self._code_results.keys())
        self.stats.build += time.perf_counter() - started
        kept: int | None = None
        try:
            fresh, same = self._same_code(built)
            started = time.perf_counter()
            fresh_inputs = [inputs[i] for i in fresh]
            fresh_built = [built[i] for i in fresh]
            fresh_results = runner.run(fresh_inputs, fresh_built)
            self.stats.run += time.perf_counter() - started
            started = time.perf_counter()
            fresh_results = self._check_new_best(
                fresh_inputs, fresh_built, fresh_results, builder, runner
            )
            self.stats.check += time.perf_counter() - started
            by_index = dict(zip(fresh, fresh_results, strict=True))
            results = self._with_same_code(built, by_index, same)
            kept = self._account(states, results)
        finally:
            release([b for index, b in enumerate(built) if index != kept])
        if kept is not None:
            if self._best_built is not None:
                release([self._best_built])
            self._best_built, self._best_builder = built[kept], builder
        records = [to_record(i, r, self.weight) for i, r in zip(inputs, results, strict=True)]
        for callback in callbacks:
            callback(records)
        started = time.perf_counter()
        self.cost_model.update(inputs, results)
        self.stats.search += time.perf_counter() - started
        return records

    def _same_code(self, built: Sequence[BuildResult]) -> tuple[list[int], dict[int, int | str]]:
        """Which candidates to run (their indices), and for the others whose
        measurement stands for theirs: an earlier candidate of the round with the same
        code (its index), or that code's measurement from an earlier round (its key)."""
        fresh: list[int] = []
        same: dict[int, int | str] = {}
        first: dict[str, int] = {}  # code key -> the round's first candidate with it
        for index, result in enumerate(built):
            key = result.code_key
            if key and key in first:
                same[index] = first[key]
            elif key and (result.duplicate or key in self._code_results):
                same[index] = key
            else:
                fresh.append(index)
                if key:
                    first[key] = index
        return fresh, same

    def _with_same_code(
        self,
        built: Sequence[BuildResult],
        fresh: dict[int, MeasureResult],
        same: dict[int, int | str],
    ) -> list[MeasureResult]:
        """Every candidate's result, in order: the run ones' own, the others' that of
        their code; the successful run ones remembered by code."""
        for index, result in fresh.items():
            if result.ok and built[index].code_key:
                self._code_results.setdefault(built[index].code_key, result)
        results = []
        for index, build in enumerate(built):
            if index in fresh:
                results.append(fresh[index])
                continue
            origin = same[index]
            earlier = fresh[origin] if isinstance(origin, int) else self._code_results.get(origin)
            self.stats.same_code += 1
            if earlier is None:  # the builder knew code this tuner never measured
                message = "the builder took its code for one measured before, but it was not"
                earlier = MeasureResult((), ErrorKind.RUNTIME, message)
            results.append(replace(earlier, all_cost=build.time_cost, timestamp=time.time()))
        return results

    def _check_new_best(
        self,
        inputs: Sequence[MeasureInput],
        built: Sequence[BuildResult],
        results: list[MeasureResult],
        builder: Builder,
        runner: Runner,
    ) -> list[MeasureResult]:
        """Confirm candidates faster than the best, fastest first: each is checked
        against the reference (a wrong one turns into a WRONG_ANSWER result) and timed
        again beside the best (`_time_beside_best`). The fastest of hundreds of noisy
        timings is faster than the program (a winner's curse), and the estimate and the
        choice of task are built on the bests. Goes on while an unconfirmed candidate's
        first timing beats the best confirmed so far, so no candidate becomes the best
        unchecked."""
        results = list(results)
        faster = sorted(
            (i for i, r in enumerate(results) if r.ok and r.median_cost < self.best_cost),
            key=lambda i: results[i].median_cost,
        )
        confirmed_best = self.best_cost
        best: tuple[MeasureInput, BuildResult, float] | None = None
        for index in faster:
            if results[index].median_cost >= confirmed_best:
                break
            verdict = runner.check(inputs[index], built[index])
            if verdict.error is not ErrorKind.NONE:
                results[index] = replace(
                    results[index], costs=(), error=verdict.error, message=verdict.message
                )
                continue
            if best is None:
                best = self._best_library(builder)
            costs = self._time_beside_best(inputs[index], built[index], best, runner)
            if costs:
                results[index] = replace(results[index], costs=costs)
            if results[index].median_cost < confirmed_best:
                confirmed_best = results[index].median_cost
                best = inputs[index], built[index], confirmed_best
        return results

    def _best_library(self, builder: Builder) -> tuple[MeasureInput, BuildResult, float] | None:
        """The best so far, its library and recorded cost; None before any best or
        when it no longer builds. The library is built again where there is none (a
        resumed run's best came from the records) or its file is gone (an earlier
        `tune` call's builder built it, and deleted its directory on closing)."""
        if self.best_state is None:
            return None
        best = MeasureInput(self.task, self.best_state)
        if self._best_built is None or self._best_builder is not builder:
            (self._best_built,) = builder.build([best])
            self._best_builder = builder
        library = self._best_built
        return (best, library, self.best_cost) if library is not None and library.ok else None

    def _time_beside_best(
        self,
        candidate: MeasureInput,
        library: BuildResult,
        best: tuple[MeasureInput, BuildResult, float] | None,
        runner: Runner,
    ) -> tuple[float, ...]:
        """The candidate's costs, timed again beside the best (the candidate, then the
        best, BESIDE_BEST_PAIRS times) and expressed on the best's recorded scale (each
        cost x the best's recorded median / its median in these timings). On a shared
        machine the speed drifts by 10-20% over minutes, and a task's first timings
        run slow: a candidate timed minutes after the best, or the default schedule
        (timed first) as the best, was often called faster than a best it then lost to
        in the network. Timed together, both see the same machine, and on the best's
        scale the log's order of the two is the order this measured (a best timed
        far off its record is timed again, see MAX_PAIR_DRIFT). The candidate
        goes first, where the timings after a pause run slowest: a false new best
        costs the network more than a missed one. Without a best's library (the first
        best), a second timing alone."""
        if best is None:
            (again,) = runner.run([candidate], [library])
            return again.costs if again.ok else ()
        best_input, best_library, best_cost = best
        pairs = [(candidate, library), (best_input, best_library)] * BESIDE_BEST_PAIRS
        scales: list[float] = []
        while True:
            timed = runner.run([i for i, _ in pairs], [b for _, b in pairs])
            costs = [c for r in timed[0::2] if r.ok for c in r.costs]
            best_costs = [c for r in timed[1::2] if r.ok for c in r.costs]
            if not costs or not best_costs:
                return tuple(costs)
            scales.append(best_cost / median_seconds(best_costs))
            if _within(scales[-1], MAX_PAIR_DRIFT):
                return tuple(c * scales[-1] for c in costs)
            if len(scales) == 2:
                agree = _within(scales[1] / scales[0], PAIR_AGREEMENT)
                return tuple(c * scales[1] for c in costs) if agree else tuple(costs)

    def _account(self, states: Sequence[State], results: Sequence[MeasureResult]) -> int | None:
        """Count the round's trials; the index of the round's new best, if any."""
        self.search.record_measured(states, [r.median_cost for r in results])
        new_best = None
        for index, (state, result) in enumerate(zip(states, results, strict=True)):
            self.trials += 1
            self.stats.trials += 1
            if not result.ok:
                self.stats.errors[result.error] += 1
            if result.ok and result.median_cost < self.best_cost:
                self.best_state, self.best_cost = state, result.median_cost
                self.trials_since_improvement = 0
                new_best = index
            else:
                self.trials_since_improvement += 1
        return new_best

    def result(self) -> TuneResult:
        return TuneResult(self.task, self.best_state, self.best_cost, self.stats)


def tune_task(
    task: SearchTask,
    options: TuningOptions | None = None,
    cost_model: CostModel | None = None,
    search_params: SearchParams | None = None,
    load_log_file: str | os.PathLike[str] | None = None,
    seed: int | None = None,
    include_default_schedule: bool = True,
) -> TuneResult:
    """Tune `task` for `options.num_measure_trials` new trials (see the module
    docstring). `load_log_file`: records of an earlier run (e.g. the same log, after
    a killed run); its states are not measured again. `include_default_schedule`:
    the default schedule joins the first population (off: search from sketches
    only, to judge the search space)."""
    options = options or TuningOptions()
    tuner = TaskTuner(task, cost_model, search_params, seed, include_default_schedule)
    if load_log_file is not None:
        tuner.load(load_records(load_log_file))
    builder, runner, owned = measurers(options)
    try:
        while tuner.stats.trials < options.num_measure_trials:
            left = options.num_measure_trials - tuner.stats.trials
            count = min(options.num_measures_per_round, left)
            if not tuner.round(count, builder, runner, options.measure_callbacks):
                break  # the search space is exhausted
            if options.verbose:
                _print_progress(tuner, options)
            if options.early_stopping and tuner.trials_since_improvement >= options.early_stopping:
                break
    finally:
        for measurer in owned:
            measurer.close()
    return tuner.result()


def measurers(options: TuningOptions) -> tuple[Builder, Runner, list[_Closable]]:
    """The options' builder and runner, local ones made for the call when None (the
    list of those, to close when done)."""
    owned: list[_Closable] = []
    builder = options.builder
    if builder is None:
        local_builder = LocalBuilder()
        owned.append(local_builder)
        builder = local_builder
    runner = options.runner
    if runner is None:
        local_runner = LocalRunner.for_timing(options.timing or DEFAULT_TIMING)
        owned.append(local_runner)
        runner = local_runner
    return builder, runner, owned


class _Closable(Protocol):
    def close(self) -> None: ...


def _print_progress(tuner: TaskTuner, options: TuningOptions) -> None:
    task, stats = tuner.task, tuner.stats
    name = task.desc or task.workload_key[:40]
    if tuner.best_state is None:
        best = "no valid candidate yet"
    else:
        gflops = task.flop_count / tuner.best_cost / 1e9
        best = f"best {tuner.best_cost * 1e3:.4f} ms ({gflops:.1f} GFLOPS)"
    errors = sum(stats.errors.values())
    print(
        f"[{name}] trials {stats.trials}/{options.num_measure_trials} | {best} | "
        f"errors {errors} | time: search {stats.search:.1f} s, build {stats.build:.1f} s, "
        f"run {stats.run + stats.check:.1f} s",
        file=sys.stdout,
        flush=True,
    )


def apply_best(task: SearchTask, log: str | os.PathLike[str] | Iterable[MeasureRecord]) -> State:
    """The fastest valid State for `task` in `log` (a records file or records), of
    those measured with the family of the compiler that builds for its target where
    there are any, as `ember.build` takes them (`ApplyHistoryBest.lookup`)."""
    record = load_best(log, task.workload_key, task.target, compiler_identity(task.target))
    if record is None:
        where = log if isinstance(log, str | os.PathLike) else "the given records"
        raise TuningError(
            f"{where} has no valid record for task {task.desc or task.workload_key} on "
            f"target {task.target}; tune it first (tune_task(task, ...) or ember tune)"
        )
    try:
        return replay(task.compute_dag, record.steps)
    except ScheduleError as error:
        raise TuningError(
            f"the best record for task {task.desc or task.workload_key} does not apply to "
            f"its DAG ({error}); was the log written by another Ember version?"
        ) from None


def _within(ratio: float, factor: float) -> bool:
    return 1 / factor <= ratio <= factor

"""Choosing the timing mode by measurement, and what a kernel's time alone says about
its time in the network.

    module = ember.build(graph, "llvm", params=params).load()   # default schedules
    set_random_inputs(module)
    calibration = calibrate(module, tasks, weights, builder, runner)
    TaskScheduler(tasks, weights, calibration=calibration).tune(options)

A candidate is timed alone, in a helper process, but runs inside the network, where
caches hold what the previous kernel wrote, the weights stream from memory and the
threads wake from the previous kernel's barrier. Which `Timing` of a lone kernel comes
closest depends on the machine (its cache sizes, its memory bandwidth, its cores): on
one Zen 5 `cold-weights` timing was within 2% of the network; on a Zen 4, 21% below
it. So it is measured here rather than fixed:

1. the network is built with its default schedules and profiled (`Module.profile`, the
   median over `repeat` runs of each step's time: the in-network time of each task's
   default schedule, and of the steps that are no task's: copies, simple groups);
2. each task's default schedule is built and timed alone under every `Timing`;
3. the timing whose lone times come closest to the in-network times (the summed
   absolute error, each task counted as often as the network runs it) is chosen.

The per-task ratio in-network / alone (under the chosen timing) then corrects the
tuning's estimate: a tuned schedule is assumed to keep its default's ratio, and the
steps no task covers are added as measured. That is the estimate the task scheduler
optimises and prints (`Calibration.estimate`).

The calibration also times the network in whole runs beside its profile, and prints
their median over the profile's sum (`Calibration.run_factor`): the share of a run a
user times that each step's median leaves out, such as another tenant's bursts on a
shared machine. It is reported, not put into the estimate: on a shared 2-core Zen 4 it
moved between minutes on one module while the profile's sum held within 1% (ResNet-50's
default network: whole runs 1.22x its profile at the calibration, 1.01x at the check
ten minutes later; the tuned artifact timed afterwards ran at the profile's time, and
the estimate scaled by the calibration's factor came out 18% high). See BENCHMARKS.md,
issue 19, seventeenth session.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ember.autoschedule.measure import (
    Builder,
    BuildResult,
    MeasureInput,
    Runner,
    Timing,
    release,
)
from ember.autoschedule.task import SearchTask
from ember.errors import EmberError
from ember.runtime.module import BenchmarkResult, Module, ModuleInfo
from ember.runtime.profile import Profile, ProfileRow
from ember.schedule.default import default_schedule

# Profiled runs of the network; each step's time is their median.
CALIBRATION_REPEAT = 20
# Whole runs of the network timed beside its profiles (run_factor): their median over
# the profile's total. Timed in blocks, one after each profile.
WHOLE_RUNS = 10
# Profiles taken, PROFILE_PAUSE_SECONDS apart; each step's time is the least of them
# (in_network_times).
CALIBRATION_PROFILES = 3
PROFILE_PAUSE_SECONDS = 0.2
# Candidates timed inside the network (swapped_in_network_times): turns of profiles of
# this many runs each. A ResNet-18 of 12 ms: 0.2 s a candidate.
SWAP_ROUNDS = 3
SWAP_REPEAT = 5
# Which timing wins a tie (equal errors): the one that models a network best by design.
TIMING_PREFERENCE = (Timing.COLD_WEIGHTS, Timing.WARM, Timing.COLD)
# Another timing replaces cold-weights only with an error this much smaller (a share of
# cold-weights' error). The default schedules cannot show everything: on ResNet-18
# (Zen 5, BENCHMARKS.md "Issue 19") warm timing came out 10.7% from the network against
# cold-weights' 11.5%, but the schedules tuned warm for the weight-heavy last layers ran
# 16-28% slower in the network than their ratio predicted (their weights stream from
# memory there, not from the caches warm timing leaves them in), and warm timing's runs
# grown to 100 ms took 340 s of a 678 s run, where cold-weights' take ~25 s (warm
# timing is now 5 repeats of 5 ms: ~45 ms a candidate).
PREFERENCE_MARGIN = 0.3
# Past this error even for the chosen timing, the lone times do not describe the
# network: on a quiet machine the best was 5-12% (ResNet-18); with both cores of a
# two-core machine busy, lone kernels took 30-200x their in-network time (OpenMP
# threads waiting for cores the network's adaptive thread count did not ask for).
MAX_PLAUSIBLE_ERROR = 0.5
# The same default network profiled at the calibration and at the last check, further
# apart than this: the machine's speed moved during the run. On a shared 2-core Zen 4
# (BENCHMARKS.md "Issue 19, twentieth session") ResNet-18's default network went from
# 16.39 ms at the calibration to 14.83 ms at the check and 12.29 ms a minute later: no
# estimate made from timings spread over the run can hold to 5% there.
DRIFT_TOLERANCE = 0.05


class CalibrationError(EmberError):
    """The network could not be profiled, or no task's default schedule could be timed."""


class TimingSettable(Runner, Protocol):
    """What calibration needs of a runner: it runs candidates, timed as `set_timing`
    says (TimingRunner)."""

    def set_timing(self, timing: Timing) -> None: ...


@dataclass(frozen=True, slots=True)
class TaskTimes:
    """One task's default schedule: seconds per call inside the network (the mean over
    the groups that run it), and alone under each timing that could time it."""

    in_network: float
    alone: Mapping[Timing, float]


@dataclass(frozen=True, slots=True)
class Calibration:
    """The outcome of `calibrate`: the chosen timing, each task's times (in the
    scheduler's task order) and the steps of the network that are no task's."""

    timing: Timing
    tasks: tuple[TaskTimes, ...]
    weights: tuple[int, ...]
    untuned_seconds: float  # per network run: steps no task covers
    network_seconds: float  # per network run: the profile's total
    # Whole runs' median over the profile's total (see the module docstring): reported,
    # not in the estimate.
    run_factor: float = 1.0

    def error(self, timing: Timing) -> float:
        """How far the lone times under `timing` are from the in-network ones: the sum
        over tasks of weight * |alone - in network|, as a share of the tasks' in-network
        total (inf when some task could not be timed this way)."""
        tasks_total, missed = 0.0, 0.0
        for weight, times in zip(self.weights, self.tasks, strict=True):
            if not times.alone:  # no timing could run it: it tells the timings nothing
                continue
            tasks_total += weight * times.in_network
            missed += weight * abs(times.alone.get(timing, math.inf) - times.in_network)
        return missed / tasks_total if tasks_total > 0 else math.inf

    def ratios(self) -> tuple[float, ...]:
        """Per task: in-network / alone time of its default schedule under the chosen
        timing (1 where that could not be measured)."""
        ratios = []
        for times in self.tasks:
            alone = times.alone.get(self.timing, math.nan)
            usable = alone > 0 and math.isfinite(alone) and times.in_network > 0
            ratios.append(times.in_network / alone if usable else 1.0)
        return tuple(ratios)

    def estimate(self, best_costs: Sequence[float]) -> float:
        """The network's latency in seconds with each task at `best_costs` (alone, under
        the chosen timing): each corrected by its task's ratio, plus the untuned steps."""
        return estimated_latency(best_costs, self.weights, self.ratios(), self.untuned_seconds)

    def table(self) -> list[str]:
        """What `ember tune` prints: each timing's error and estimate of the untuned
        network, against the profile."""
        lines = [
            f"Timing calibration: the network with default schedules runs in "
            f"{self.network_seconds * 1e3:.3f} ms by its steps ({self.untuned_seconds * 1e3:.3f} "
            f"ms of it in steps no task covers; whole runs {self.run_factor:.2f}x that); "
            "its tasks' default schedules timed alone:",
            f"  {'timing':<13} {'error':>7} {'estimate (ms)':>14}",
        ]
        for timing in TIMING_PREFERENCE:
            error = self.error(timing)
            total = sum(
                w * t.alone.get(timing, math.inf)
                for w, t in zip(self.weights, self.tasks, strict=True)
            )
            chosen = "  <- chosen" if timing is self.timing else ""
            shown = f"{error * 100:6.1f}%" if math.isfinite(error) else f"{'-':>7}"
            estimate = (total + self.untuned_seconds) * 1e3
            shown_estimate = f"{estimate:14.3f}" if math.isfinite(estimate) else f"{'-':>14}"
            lines.append(f"  {timing.value:<13} {shown} {shown_estimate}{chosen}")
        return lines


def drift_line(calibrated_seconds: float, now_seconds: float) -> str | None:
    """A warning when the network with default schedules, profiled at the calibration
    in `calibrated_seconds` and again now in `now_seconds` (the same statistic: each
    step's least of CALIBRATION_PROFILES profiles), moved by more than DRIFT_TOLERANCE:
    the estimate sums timings taken all through the run, so a machine whose speed
    moves cannot be estimated closer than that. None within the tolerance, or when a
    time is missing."""
    usable = all(math.isfinite(t) and t > 0 for t in (calibrated_seconds, now_seconds))
    if not usable or abs(now_seconds / calibrated_seconds - 1.0) <= DRIFT_TOLERANCE:
        return None
    return (
        f"This machine's speed moved during the run: the network with default schedules "
        f"ran in {now_seconds * 1e3:.3f} ms now against {calibrated_seconds * 1e3:.3f} ms at "
        f"the calibration ({now_seconds / calibrated_seconds:.2f}x), the same schedules. "
        "Estimates are sums of timings taken all through the run and can be off by as "
        "much; tune on an idle machine for estimates that hold to a few percent"
    )


def estimated_latency(
    best_costs: Sequence[float],
    weights: Sequence[int],
    ratios: Sequence[float],
    untuned_seconds: float = 0.0,
) -> float:
    """sum(best cost * weight * ratio) + untuned_seconds: each task's best, timed alone,
    times how often the network runs it and how much slower it runs there (a
    Calibration's ratios; 1 without one), plus the steps no task covers."""
    corrected = zip(best_costs, weights, ratios, strict=True)
    return sum(cost * weight * ratio for cost, weight, ratio in corrected) + untuned_seconds


def choose_timing(tasks: Sequence[TaskTimes], weights: Sequence[int]) -> Timing:
    """The timing with the smallest `Calibration.error`, except that another timing
    must beat cold-weights' error by more than PREFERENCE_MARGIN of it to be chosen
    (ties otherwise follow TIMING_PREFERENCE)."""
    trial = Calibration(Timing.COLD_WEIGHTS, tuple(tasks), tuple(weights), 0.0, 0.0)
    errors = {timing: trial.error(timing) for timing in TIMING_PREFERENCE}

    def rank(timing: Timing) -> tuple[float, int]:
        handicap = 1.0 if timing is Timing.COLD_WEIGHTS else 1 / (1 - PREFERENCE_MARGIN)
        return errors[timing] * handicap, TIMING_PREFERENCE.index(timing)

    best = min(TIMING_PREFERENCE, key=rank)
    if not math.isfinite(errors[best]):
        raise CalibrationError(
            "no timing could time every task's default schedule; choose one with --timing"
        )
    return best


class ProfiledModule(Protocol):
    """What calibration needs of the network: a runtime Module (`ember.build(...).load()`)
    or a RemoteModule, its inputs set."""

    @property
    def info(self) -> ModuleInfo: ...

    def profile(self, repeat: int = 10) -> Profile: ...

    def benchmark(
        self, repeat: int = 3, number: int = 1, min_repeat_ms: float = 500
    ) -> BenchmarkResult: ...


def whole_run_seconds(
    modules: Sequence[ProfiledModule], runs: int = WHOLE_RUNS, blocks: int = CALIBRATION_PROFILES
) -> list[float]:
    """Per module, the median seconds of `runs` whole runs (rounded up to a multiple
    of `blocks`), timed in C, in `blocks` turns PROFILE_PAUSE_SECONDS apart, the
    modules in turn within each (so that the machine's drift falls on all alike)."""
    times: list[list[float]] = [[] for _ in modules]
    per_block = max(1, math.ceil(runs / blocks))
    for number in range(blocks):
        if number:
            time.sleep(PROFILE_PAUSE_SECONDS)
        for position, module in enumerate(modules):
            result = module.benchmark(repeat=per_block, number=1, min_repeat_ms=0)
            times[position] += result.seconds
    return [statistics.median(seconds) for seconds in times]


def run_factor(run_seconds: float, profiled_seconds: float) -> float:
    """Whole runs' time over the profile's total (1 where either is unusable)."""
    usable = 0 < run_seconds < math.inf and 0 < profiled_seconds < math.inf
    return run_seconds / profiled_seconds if usable else 1.0


def in_network_times(
    module: ProfiledModule,
    tasks: Sequence[SearchTask],
    repeat: int = CALIBRATION_REPEAT,
    profiles: int = CALIBRATION_PROFILES,
) -> tuple[list[float], float, float]:
    """Profile `module` (the network) and return per task the mean seconds per call of
    its groups, the seconds of the steps no task covers, and the total: each step's
    time is the least of `profiles` profiles' medians, taken PROFILE_PAUSE_SECONDS
    apart, because another tenant of a shared machine can slow a whole profile (its
    20 runs last a few milliseconds each): a ResNet-18 profiled mid-tuning came out
    at 1.7x its time a minute later, and the ratios taken from it put the estimate at
    173% of the network."""
    return alternating_in_network_times([module], tasks, repeat, profiles)[0]


def alternating_in_network_times(
    modules: Sequence[ProfiledModule],
    tasks: Sequence[SearchTask],
    repeat: int = CALIBRATION_REPEAT,
    profiles: int = CALIBRATION_PROFILES,
) -> list[tuple[list[float], float, float]]:
    """`in_network_times` of several builds of one network (say tuned and default),
    their profiles taken in turn, so that the machine's drift over minutes falls on
    all of them alike."""
    step_seconds: list[list[float]] = [[] for _ in modules]
    rows: list[Sequence[ProfileRow]] = [() for _ in modules]
    for number in range(profiles):
        if number:
            time.sleep(PROFILE_PAUSE_SECONDS)
        for position, module in enumerate(modules):
            rows[position] = module.profile(repeat=repeat).rows
            times = [row.seconds for row in rows[position]]
            kept = step_seconds[position]
            step_seconds[position] = times if not kept else list(map(min, kept, times))
    return [
        _per_task(module, module_rows, seconds, tasks)
        for module, module_rows, seconds in zip(modules, rows, step_seconds, strict=True)
    ]


class SwappableModule(ProfiledModule, Protocol):
    """A network whose steps can run other kernels (`ember.runtime.Module`)."""

    def kernel_steps(self, workload_key: str) -> list[int]: ...

    def set_step_kernel(self, step: int, library: str | None = None, symbol: str = "") -> None: ...


def swapped_in_network_times(
    module: SwappableModule,
    tasks: Sequence[SearchTask],
    index: int,
    libraries: Sequence[BuildResult],
    rounds: int = SWAP_ROUNDS,
    repeat: int = SWAP_REPEAT,
) -> list[float]:
    """Task `index`'s seconds per call inside `module`, its steps running each of
    `libraries` (its candidates, built by a tuning builder) in turn: each one's least
    time over `rounds` turns of profiles of `repeat` runs, so that the machine's
    drift falls on all alike. The steps get their own kernels back after. Raises
    CalibrationError where a library did not build, or where some step of the task
    cannot take a kernel built alone (`Module.kernel_steps`): its time would mix in
    the step's own kernel."""
    task = tasks[index]
    _swappable_steps(module, task)  # refused before any candidate is timed
    if not all(library.ok for library in libraries):
        raise CalibrationError(f"a candidate of task {task.desc} did not build")
    least = [math.inf] * len(libraries)
    for _ in range(rounds):
        for position, library in enumerate(libraries):
            in_network, _, _ = swapped_network_times(
                module, tasks, {index: library}, repeat, profiles=1
            )
            least[position] = min(least[position], in_network[index])
    return least


def swapped_network_times(
    module: SwappableModule,
    tasks: Sequence[SearchTask],
    kernels: Mapping[int, BuildResult],
    repeat: int = CALIBRATION_REPEAT,
    profiles: int = CALIBRATION_PROFILES,
) -> tuple[list[float], float, float]:
    """`in_network_times` of `module` with the steps of each task index in `kernels`
    running that library's kernel (a candidate built by a tuning builder) instead of
    their own: a network with those schedules, without building it again. The steps
    get their own kernels back after. Raises CalibrationError, before it swaps any,
    where a library did not build or a task's steps cannot take a kernel built alone."""
    swaps = [
        (_swappable_steps(module, tasks[index]), library)
        for index, library in sorted(kernels.items())
    ]
    failed = [tasks[index].desc for index, library in kernels.items() if not library.ok]
    if failed:
        raise CalibrationError(f"the candidate of task(s) {failed[:3]} did not build")
    try:
        for steps, library in swaps:
            for step in steps:
                module.set_step_kernel(step, library.path, library.symbol)
        return in_network_times(module, tasks, repeat, profiles)
    finally:
        _restore_steps(module, [step for steps, _ in swaps for step in steps])


def _restore_steps(module: SwappableModule, steps: Sequence[int]) -> None:
    """Give each of `steps` its own kernel back, all of them even where one fails (the
    first failure raised after)."""
    failure: BaseException | None = None
    for step in steps:
        try:
            module.set_step_kernel(step, None)
        except Exception as error:
            failure = failure or error
    if failure is not None:
        raise failure


def _swappable_steps(module: SwappableModule, task: SearchTask) -> list[int]:
    """The steps of `task` in `module`, all of which can run a kernel built alone; a
    CalibrationError where some cannot (they write slices of a concatenation) or the
    network has none."""
    steps = module.kernel_steps(task.workload_key)
    groups = [group for group in module.info.groups if group.workload_key == task.workload_key]
    if not steps or len(steps) != len(groups):
        raise CalibrationError(
            f"{len(groups) - len(steps)} of the {len(groups)} steps of task {task.desc} "
            "cannot run a kernel built alone (they write slices of a concatenation)"
            if steps
            else f"the network has no step of task {task.desc} to run a candidate in"
        )
    return steps


def _per_task(
    module: ProfiledModule,
    rows: Sequence[ProfileRow],
    step_seconds: Sequence[float],
    tasks: Sequence[SearchTask],
) -> tuple[list[float], float, float]:
    """A profile's least step times as `in_network_times` returns them."""
    groups = {group.name: group.workload_key for group in module.info.groups}
    index_of = {task.workload_key: index for index, task in enumerate(tasks)}
    seconds: dict[int, list[float]] = defaultdict(list)
    untuned = 0.0
    for row, row_seconds in zip(rows, step_seconds, strict=True):
        index = index_of.get(groups.get(row.group) or "")
        if index is None:
            untuned += row_seconds
        else:
            seconds[index].append(row_seconds)
    missing = [
        tasks[i].desc or tasks[i].workload_key for i in range(len(tasks)) if i not in seconds
    ]
    if missing:
        raise CalibrationError(
            f"the profile of the network has no step for the task(s) {missing[:3]}: the "
            "tasks must come from the module's graph and target (extract_tasks)"
        )
    per_call = [sum(seconds[i]) / len(seconds[i]) for i in range(len(tasks))]
    return per_call, untuned, sum(step_seconds)


def set_random_inputs(module: Module, seed: int = 0) -> None:
    """Give each input of `module` random values: normal floats, zero integers (zero is
    in range for any index or id)."""
    rng = np.random.default_rng(seed)
    for spec in module.info.inputs:
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            module.set_input(spec.name, rng.standard_normal(spec.shape).astype(dtype))
        else:
            module.set_input(spec.name, np.zeros(spec.shape, dtype))


def time_defaults_alone(
    tasks: Sequence[SearchTask], builder: Builder, runner: TimingSettable
) -> list[dict[Timing, float]]:
    """Per task, the mean seconds of its default schedule alone under each timing that
    could time it (a timing that failed is left out). Each task is timed under every
    timing before the next task, so that a burst of another tenant's work on a shared
    machine slows a few tasks under all timings alike, not one timing of every task:
    ViT-B/16's defaults timed one timing after another once came out 63% slower
    under cold-weights timing than in a calibration a few minutes later, which chose
    cold timing and made the run three times as long (BENCHMARKS.md, issue 19,
    thirteenth session)."""
    inputs = [MeasureInput(task, default_schedule(task.compute_dag, task.target)) for task in tasks]
    built = builder.build(inputs)
    times: list[dict[Timing, float]] = [{} for _ in tasks]
    try:
        for index, (measure_input, library) in enumerate(zip(inputs, built, strict=True)):
            for timing in TIMING_PREFERENCE:
                runner.set_timing(timing)
                (result,) = runner.run([measure_input], [library])
                if result.ok:
                    times[index][timing] = result.median_cost
    finally:
        release(built)
    return times


def calibrate(
    module: ProfiledModule,
    tasks: Sequence[SearchTask],
    weights: Sequence[int],
    builder: Builder,
    runner: TimingSettable,
    repeat: int = CALIBRATION_REPEAT,
    max_error: float | None = None,
) -> Calibration:
    """Profile `module` (the network of `tasks`, built with default schedules, inputs
    set: `set_random_inputs`), time each task's default schedule alone under every
    timing and choose the timing closest to the network (see the module docstring).
    Leaves `runner` timing as chosen, with that timing's default settings. Raises
    CalibrationError when even that timing is more than `max_error` (default
    MAX_PLAUSIBLE_ERROR) from the network."""
    if not tasks:
        raise CalibrationError("there are no tasks to calibrate")
    in_network, untuned, total = in_network_times(module, tasks, repeat)
    (whole_run,) = whole_run_seconds([module])
    alone = time_defaults_alone(tasks, builder, runner)
    times = tuple(TaskTimes(net, lone) for net, lone in zip(in_network, alone, strict=True))
    timing = choose_timing(times, weights)
    factor = run_factor(whole_run, total)
    calibration = Calibration(timing, times, tuple(weights), untuned, total, factor)
    if calibration.error(timing) > (MAX_PLAUSIBLE_ERROR if max_error is None else max_error):
        alone_total = sum(w * t.alone.get(timing, 0.0) for w, t in zip(weights, times, strict=True))
        raise CalibrationError(
            f"timed alone, the default schedules are {calibration.error(timing):.0%} from "
            f"their times in the network even with {timing.value} timing ({alone_total * 1e3:.3f} "
            f"ms in all against {(total - untuned) * 1e3:.3f} ms); is the machine busy?"
        )
    runner.set_timing(timing)
    return calibration

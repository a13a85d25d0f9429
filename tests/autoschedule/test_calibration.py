"""Timing calibration (ember.autoschedule.calibration) with a fake network profile and a
fake runner: it picks the timing whose lone times match the network, corrects the
estimate by each task's in-network / alone ratio and adds the steps no task covers; the
scheduler uses it; and the real thing on a small network, end to end."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_measure import SMALL_SEARCH, FakeBuilder, dense_relu_task

import ember
from ember.autoschedule import LocalBuilder, LocalRunner, SearchTask, extract_tasks
from ember.autoschedule.calibration import (
    DRIFT_TOLERANCE,
    TIMING_PREFERENCE,
    Calibration,
    CalibrationError,
    TaskTimes,
    calibrate,
    choose_timing,
    drift_line,
    set_random_inputs,
    swapped_network_times,
)
from ember.autoschedule.measure import BuildResult, MeasureInput, MeasureResult, Timing
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.task_scheduler import TaskScheduler
from ember.autoschedule.tuning import TuningError
from ember.cli_commands.common import load_model
from ember.runtime.module import BenchmarkResult
from ember.runtime.profile import GroupInfo, Profile

# Seconds per call inside the network, per task; the fake runner's lone times are these
# times a factor that depends on the timing.
IN_NETWORK = {"big": 4e-3, "small": 1e-4}
# Whole runs of the fake network over its steps' sum: the bursts of another tenant that
# each step's median leaves out.
RUN_TAX = 1.05


@dataclass
class FakeInfo:
    groups: tuple[GroupInfo, ...]


class FakeModule:
    """A network of groups big, small, big (the big task runs twice) and a copy step."""

    def __init__(self, tasks: Sequence[SearchTask]) -> None:
        big, small = tasks
        self.steps = [
            ("g0", big.workload_key, IN_NETWORK["big"] * 1.1),
            ("g1", small.workload_key, IN_NETWORK["small"]),
            ("g2", big.workload_key, IN_NETWORK["big"] * 0.9),
            ("copy", None, 5e-5),
        ]
        self.info = FakeInfo(
            tuple(GroupInfo(name, "kernel", name, key, None) for name, key, _ in self.steps)
        )
        self.repeats: list[int] = []
        self.benchmarks: list[int] = []

    def profile(self, repeat: int = 10) -> Profile:
        """The first profile runs beside another tenant: every step twice as long; the
        calibration must take each step's least time over its profiles."""
        self.repeats.append(repeat)
        names = [name for name, _, _ in self.steps]
        slowed = 2.0 if len(self.repeats) == 1 else 1.0
        seconds = [time * slowed for _, _, time in self.steps]
        return Profile.from_steps(names, names, seconds, self.info.groups, repeat)

    def benchmark(
        self, repeat: int = 3, number: int = 1, min_repeat_ms: float = 500
    ) -> BenchmarkResult:
        """Whole runs: the steps' sum x RUN_TAX, one run in each block twice as long."""
        self.benchmarks.append(repeat)
        run = RUN_TAX * sum(time for _, _, time in self.steps)
        return BenchmarkResult((2 * run,) + (run,) * (repeat - 1))


class SwappingModule(FakeModule):
    """FakeModule whose steps can run other kernels: a library named `<factor>.so`
    makes its steps take `factor` times as long; `views` lists workload keys whose
    steps write slices of a concatenation (no kernel built alone may run there)."""

    def __init__(self, tasks: Sequence[SearchTask], views: Sequence[str] = ()) -> None:
        super().__init__(tasks)
        self.views = set(views)
        self.kernels: dict[int, str] = {}
        self.own = list(self.steps)

    def kernel_steps(self, workload_key: str) -> list[int]:
        if workload_key in self.views:
            return []
        return [i for i, (_, key, _) in enumerate(self.own) if key == workload_key]

    def set_step_kernel(self, step: int, library: str | None = None, symbol: str = "") -> None:
        if library is None:
            self.kernels.pop(step, None)
        else:
            self.kernels[step] = library
        name, key, seconds = self.own[step]
        factor = 1.0 if library is None else float(Path(library).stem)
        self.steps[step] = (name, key, seconds * factor)


class TimingRunner:
    """Times each task as IN_NETWORK x factors[timing]; a timing missing from
    `factors` fails every candidate (a runtime error)."""

    def __init__(self, factors: dict[Timing, float]) -> None:
        self.factors = factors
        self.timing = Timing.WARM
        self.timings: list[Timing] = []
        self.calls: list[tuple[str, Timing]] = []  # (task, timing) of each candidate timed

    def set_timing(self, timing: Timing) -> None:
        self.timing = timing
        self.timings.append(timing)

    def run(
        self, inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]
    ) -> list[MeasureResult]:
        self.calls += [(measure_input.task.desc, self.timing) for measure_input in inputs]
        factor = self.factors.get(self.timing)
        if factor is None:
            return [MeasureResult((), ErrorKind.RUNTIME, "cannot") for _ in inputs]
        return [MeasureResult((IN_NETWORK[i.task.desc] * factor,)) for i in inputs]

    def check(self, measure_input: MeasureInput, build_result: BuildResult) -> MeasureResult:
        return MeasureResult(())


@pytest.fixture(scope="module")
def tasks() -> list[SearchTask]:
    return [dense_relu_task(16, 32, 24, "big"), dense_relu_task(8, 16, 8, "small")]


@pytest.mark.parametrize("right", list(Timing))
def test_calibration_picks_the_timing_the_runner_makes_right(
    tasks: list[SearchTask], right: Timing
) -> None:
    factors = {timing: 0.6 if timing is Timing.WARM else 1.7 for timing in Timing}
    factors[right] = 1.02
    runner, module, builder = TimingRunner(factors), FakeModule(tasks), FakeBuilder()
    calibration = calibrate(module, tasks, [2, 1], builder, runner, repeat=7)
    assert calibration.timing is right and runner.timing is right
    assert module.repeats == [7, 7, 7]  # CALIBRATION_PROFILES, each step's least kept
    # Each task's default schedule is built once and timed under every timing.
    assert [desc for desc, _ in builder.built] == ["big", "small"]
    assert sorted(runner.timings[:3], key=str) == sorted(Timing, key=str)
    # Every timing of one task before the next: a burst on the machine falls on a task's
    # timings alike.
    assert runner.calls == [(desc, t) for desc in ("big", "small") for t in TIMING_PREFERENCE]
    assert calibration.untuned_seconds == pytest.approx(5e-5)
    assert calibration.network_seconds == pytest.approx(2 * 4e-3 + 1e-4 + 5e-5)
    big, small = calibration.tasks
    assert big.in_network == pytest.approx(4e-3)  # the mean of its two groups
    assert small.alone[right] == pytest.approx(1.02e-4)
    assert calibration.error(right) == pytest.approx(0.02)
    # Whole runs, timed in a block after each profile, take RUN_TAX x the profile's sum
    # (their median leaves out the slow run of each block): reported, not in the ratios.
    assert module.benchmarks == [4, 4, 4]
    assert calibration.run_factor == pytest.approx(RUN_TAX)
    assert calibration.ratios() == pytest.approx((1 / 1.02, 1 / 1.02))
    table = "\n".join(calibration.table())
    assert f"{right.value}" in table and "<- chosen" in table and "8.150 ms" in table
    assert "whole runs 1.05x that" in table


def test_the_network_profiled_with_candidates_in_their_steps(tasks: list[SearchTask]) -> None:
    """swapped_network_times: the network's profile with each given task's steps
    running its library, every step given its own kernel back after; refused before
    any swap where a library did not build or a task's steps cannot take one."""
    module = SwappingModule(tasks)
    big = BuildResult("/tmp/0.5.so", "candidate_0_packed", ())
    per_task, untuned, total = swapped_network_times(module, tasks, {0: big}, repeat=3)
    assert per_task == pytest.approx([0.5 * IN_NETWORK["big"], IN_NETWORK["small"]])
    assert untuned == pytest.approx(5e-5)
    assert total == pytest.approx(IN_NETWORK["big"] + IN_NETWORK["small"] + 5e-5)
    assert module.kernels == {} and module.steps == module.own  # given back
    assert module.repeats == [3, 3, 3]

    failed = BuildResult(None, "", (), ErrorKind.COMPILE, "no")
    with pytest.raises(CalibrationError, match="did not build"):
        swapped_network_times(module, tasks, {0: big, 1: failed})
    assert module.repeats == [3, 3, 3]  # refused before any profile
    views = SwappingModule(tasks, views=[tasks[1].workload_key])
    with pytest.raises(CalibrationError, match="no step of task"):
        swapped_network_times(views, tasks, {0: big, 1: big})
    assert module.kernels == {} == views.kernels and views.repeats == []

    def failing_profile(repeat: int = 10) -> Profile:
        raise CalibrationError("the profile failed")

    module.profile = failing_profile  # type: ignore[method-assign]
    with pytest.raises(CalibrationError, match="the profile failed"):
        swapped_network_times(module, tasks, {0: big})
    assert module.kernels == {} and module.steps == module.own  # given back all the same


def test_the_estimate_corrects_each_task_and_adds_the_untuned_steps() -> None:
    times = (
        TaskTimes(2e-3, {Timing.COLD_WEIGHTS: 1e-3, Timing.WARM: 0.5e-3}),
        TaskTimes(1e-4, {Timing.COLD_WEIGHTS: 1e-4, Timing.WARM: 1e-4}),
    )
    calibration = Calibration(Timing.COLD_WEIGHTS, times, (3, 1), 2e-4, 7e-3)
    assert calibration.ratios() == pytest.approx((2.0, 1.0))
    # Tuned to 0.8 ms alone, the first task is expected at 1.6 ms in the network.
    assert calibration.estimate([0.8e-3, 1e-4]) == pytest.approx(3 * 1.6e-3 + 1e-4 + 2e-4)
    # error: weight x |alone - in network|, over the in-network total.
    assert calibration.error(Timing.COLD_WEIGHTS) == pytest.approx(3e-3 / 6.1e-3)
    assert calibration.error(Timing.WARM) == pytest.approx(4.5e-3 / 6.1e-3)
    assert math.isinf(calibration.error(Timing.COLD))  # no task timed cold
    assert choose_timing(times, (3, 1)) is Timing.COLD_WEIGHTS


def test_a_machine_whose_speed_moved_during_the_run_is_named() -> None:
    # Within the tolerance either way: nothing to say.
    inside = 0.99 * DRIFT_TOLERANCE
    for now in (10e-3 * (1 - inside), 10e-3, 10e-3 * (1 + inside)):
        assert drift_line(10e-3, now) is None
    # ResNet-18 on a shared Zen 4: 16.389 ms at the calibration, 14.826 at the check.
    slower = drift_line(16.389e-3, 14.826e-3)
    assert slower is not None
    assert "14.826 ms now against 16.389 ms at the calibration (0.90x)" in slower
    faster = drift_line(10e-3, 12e-3)
    assert faster is not None and "(1.20x)" in faster
    # A time that could not be measured says nothing either.
    assert drift_line(math.inf, 10e-3) is None and drift_line(10e-3, 0.0) is None


def test_a_task_no_timing_could_run_is_left_out_and_a_tie_goes_to_cold_weights() -> None:
    same = {timing: 1e-3 for timing in Timing}
    times = (TaskTimes(1e-3, same), TaskTimes(5e-3, {}))
    assert choose_timing(times, (1, 1)) is Timing.COLD_WEIGHTS
    calibration = Calibration(Timing.COLD_WEIGHTS, times, (1, 1), 0.0, 6e-3)
    assert calibration.ratios() == (1.0, 1.0)  # the unmeasured task keeps its lone time
    with pytest.raises(CalibrationError, match="choose one with --timing"):
        choose_timing((TaskTimes(5e-3, {}),), (1,))


def test_another_timing_must_beat_cold_weights_by_a_margin() -> None:
    # In-network 1 ms; cold-weights 12% off. Warm 10% off is not enough to switch (the
    # defaults do not show what warm timing hides, see PREFERENCE_MARGIN); 5% is.
    def times(warm: float) -> tuple[TaskTimes, ...]:
        alone = {Timing.COLD_WEIGHTS: 1.12e-3, Timing.WARM: warm, Timing.COLD: 2e-3}
        return (TaskTimes(1e-3, alone),)

    assert choose_timing(times(0.90e-3), (1,)) is Timing.COLD_WEIGHTS
    assert choose_timing(times(0.95e-3), (1,)) is Timing.WARM


def test_lone_times_far_from_the_network_under_every_timing_are_refused(
    tasks: list[SearchTask],
) -> None:
    # A busy machine: every kernel alone takes 3x its time in the network.
    runner = TimingRunner({timing: 3.0 for timing in Timing})
    with pytest.raises(CalibrationError, match=r"200% from their times .* is the machine busy"):
        calibrate(FakeModule(tasks), tasks, [2, 1], FakeBuilder(), runner)
    calibration = calibrate(FakeModule(tasks), tasks, [2, 1], FakeBuilder(), runner, 1, 2.5)
    assert calibration.timing is Timing.COLD_WEIGHTS


def test_a_profile_without_the_tasks_is_refused(tasks: list[SearchTask]) -> None:
    other = [dense_relu_task(4, 4, 4, "big"), dense_relu_task(4, 8, 4, "small")]
    with pytest.raises(CalibrationError, match="has no step for the task"):
        calibrate(FakeModule(tasks), other, [1, 1], FakeBuilder(), TimingRunner({}))


def test_the_scheduler_estimates_and_chooses_with_the_calibration(
    tasks: list[SearchTask],
) -> None:
    times = (TaskTimes(3e-3, {Timing.WARM: 1e-3}), TaskTimes(1e-4, {Timing.WARM: 1e-4}))
    calibration = Calibration(Timing.WARM, times, (1, 1), 5e-4, 4e-3)
    plain = TaskScheduler(tasks, [1, 1], cost_model="random", search_params=SMALL_SEARCH)
    calibrated = TaskScheduler(
        tasks, [1, 1], cost_model="random", search_params=SMALL_SEARCH, calibration=calibration
    )
    for scheduler in (plain, calibrated):
        scheduler.tuners[0].best_cost, scheduler.tuners[0].trials = 1e-3, 8
        scheduler.tuners[1].best_cost, scheduler.tuners[1].trials = 1e-4, 8
    assert plain._estimate() == pytest.approx(1.1e-3)
    assert calibrated._estimate() == pytest.approx(3e-3 + 1e-4 + 5e-4)
    # A task that runs 3x slower in the network is worth 3x more trials' gain.
    assert calibrated.expected_gain(0) == pytest.approx(3 * plain.expected_gain(0))
    result = calibrated._result(1.0, False, [])
    assert result.estimated_latency == pytest.approx(3.6e-3)
    with pytest.raises(TuningError, match="calibration has 1 tasks"):
        calibrated.set_calibration(Calibration(Timing.WARM, times[:1], (1,), 0.0, 1e-3))


def test_calibrating_a_real_network_measures_every_timing() -> None:
    # The built-in MLP, built and profiled here, its defaults timed by the local runner:
    # which timing wins depends on the machine, so only what was measured is checked.
    graph, params = load_model("mlp", {"data": (1, 3, 8, 8)})
    tasks, weights = extract_tasks(graph, params, "llvm")
    module = ember.build(graph, "llvm", params=params).load()
    set_random_inputs(module)
    with LocalBuilder(n_parallel=1) as builder, LocalRunner() as runner:
        # However busy the machine (no bound on the error): the plumbing is checked.
        calibration = calibrate(module, tasks, weights, builder, runner, 3, math.inf)
        assert runner.timing is calibration.timing
    module.close()
    assert len(calibration.tasks) == len(tasks) == 4
    for times in calibration.tasks:
        assert times.in_network > 0 and set(times.alone) == set(Timing)
    assert 0 <= calibration.untuned_seconds < calibration.network_seconds
    assert all(ratio > 0 for ratio in calibration.ratios())
    assert calibration.run_factor > 0
    estimate = calibration.estimate([t.alone[calibration.timing] for t in calibration.tasks])
    assert estimate == pytest.approx(calibration.network_seconds, rel=1e-6)

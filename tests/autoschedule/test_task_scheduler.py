"""TaskScheduler with fake measurers: where the budget goes (the task that dominates
the estimated latency), round-robin, per-task early stopping, resume from a log, the
printed table, and the errors a user can cause."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from fake_measure import SMALL_SEARCH, FakeBuilder, FakeRunner, dense_relu_task

from ember.autoschedule import MeasureRecord, RecordToFile, SearchTask, extract_tasks, load_records
from ember.autoschedule.calibration import Calibration, TaskTimes
from ember.autoschedule.measure import BuildResult, MeasureResult, Timing
from ember.autoschedule.records import state_key, steps_key
from ember.autoschedule.task_scheduler import TaskScheduler, round_size, task_tag
from ember.autoschedule.tuning import TuningError, TuningOptions
from ember.autoschedule.xgb_model import CostModelError, XGBModel
from ember.errors import EmberError
from ember.graph import GraphBuilder
from ember.graph.ir import Value
from ember.graph.ops.attrs import ConvAttrs
from ember.target import Target


@pytest.fixture(scope="module")
def tasks() -> list[SearchTask]:
    return [dense_relu_task(16, 32, 24, "big"), dense_relu_task(8, 16, 8, "small")]


def options(
    trials: int, builder: FakeBuilder, runner: FakeRunner, **kwargs: object
) -> TuningOptions:
    settings: dict[str, object] = {"num_measures_per_round": 4, "verbose": 0, **kwargs}
    return TuningOptions(
        num_measure_trials=trials,
        builder=builder,
        runner=runner,
        **settings,  # type: ignore[arg-type]
    )


def test_the_budget_goes_to_the_task_that_dominates_the_latency(tasks: list[SearchTask]) -> None:
    builder = FakeBuilder()
    runner = FakeRunner({"big": 1e-2, "small": 1e-5})
    scheduler = TaskScheduler(
        tasks, [3, 1], cost_model="random", search_params=SMALL_SEARCH, seed=0
    )
    records: list[MeasureRecord] = []
    result = scheduler.tune(options(64, builder, runner, measure_callbacks=[records.extend]))
    assert result.total_trials == 64 and not result.interrupted
    big, small = result.task_trials
    # 'small' is ~0.03% of the estimate: its warm-up round, at most one random round.
    assert small <= 8 and big >= 56
    assert [trials for trials, _, _ in result.history] == list(range(4, 65, 4))
    # Each round's estimate is sum(weight x best cost so far) over the records measured
    # until then (inf while a task has none), and the final one is the result's.
    weights = {tasks[0].workload_key: 3, tasks[1].workload_key: 1}
    for trials, _, estimate in result.history:
        best: dict[str, float] = {}
        for record in records[:trials]:
            key = record.task.workload_key
            best[key] = min(best.get(key, math.inf), record.median_cost)
        if len(best) < len(tasks):
            assert estimate == math.inf, trials
        else:
            assert estimate == pytest.approx(sum(weights[k] * c for k, c in best.items()))
    assert result.history[-1][2] == result.estimated_latency
    assert result.estimated_latency == pytest.approx(
        3 * result.best_costs[0] + result.best_costs[1]
    )


def test_round_robin_alternates(tasks: list[SearchTask]) -> None:
    scheduler = TaskScheduler(
        tasks, [3, 1], strategy="round-robin", cost_model="random", search_params=SMALL_SEARCH
    )
    result = scheduler.tune(options(24, FakeBuilder(), FakeRunner({"big": 1e-2, "small": 1e-5})))
    assert result.task_trials == (12, 12)


def test_a_stalled_task_stops_and_the_rest_continue(tasks: list[SearchTask]) -> None:
    class Stalling(FakeRunner):
        """'small' never improves after its first round; 'big' keeps improving."""

        def __init__(self) -> None:
            super().__init__({"big": 1e-2, "small": 1e-3})
            self.calls = {"big": 0, "small": 0}
            self.costs: dict[str, float] = {}  # each state's, fixed when first timed

        def run(self, inputs, build_results):  # type: ignore[no-untyped-def]
            desc = inputs[0].task.desc
            self.calls[desc] += 1
            for measure_input in inputs:
                key = state_key(measure_input.state)
                if key not in self.costs and desc == "small":
                    self.costs[key] = 1e-3 if self.calls[desc] == 1 else 2e-3
                elif key not in self.costs:
                    self.costs[key] = 1e-2 / self.calls[desc]
            return [MeasureResult((self.costs[state_key(i.state)],)) for i in inputs]

    scheduler = TaskScheduler(
        tasks, strategy="round-robin", cost_model="random", search_params=SMALL_SEARCH
    )
    result = scheduler.tune(options(40, FakeBuilder(), Stalling(), early_stopping=8))
    assert result.task_trials[1] == 12  # 4 to find its best, then 8 without improvement
    assert result.task_trials[0] == 28


def test_resume_measures_nothing_twice(tasks: list[SearchTask], tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    runner = FakeRunner({"big": 1e-2, "small": 1e-3})
    first = TaskScheduler(tasks, [1, 2], cost_model="random", search_params=SMALL_SEARCH, seed=0)
    first.tune(options(16, FakeBuilder(), runner, measure_callbacks=[RecordToFile(log)]))
    records = load_records(log)
    assert len(records) == 16
    assert {r.task.weight for r in records} == {1, 2}
    builder = FakeBuilder()
    second = TaskScheduler(
        tasks, [1, 2], cost_model="random", search_params=SMALL_SEARCH, seed=0, load_log_file=log
    )
    result = second.tune(options(16, builder, runner))
    keys_before = {
        (next(t.desc for t in tasks if t.workload_key == r.task.workload_key), steps_key(r.steps))
        for r in records
    }
    assert len([key for key in builder.built if key not in keys_before]) == 16
    # Only a task's best from the log is built again, once, to time challengers beside.
    bests = {
        (task.desc, steps_key(min(
            (r for r in records if r.task.workload_key == task.workload_key),
            key=lambda r: r.median_cost,
        ).steps))
        for task in tasks
    }  # fmt: skip
    again = [key for key in builder.built if key in keys_before]
    assert set(again) <= bests and len(again) == len(set(again))
    # Each task starts from the best of the log.
    for index, task in enumerate(tasks):
        best = min(r.median_cost for r in records if r.task.workload_key == task.workload_key)
        assert result.best_costs[index] <= best


def test_the_table_is_printed_each_round(
    tasks: list[SearchTask], capsys: pytest.CaptureFixture[str]
) -> None:
    scheduler = TaskScheduler(tasks, cost_model="random", search_params=SMALL_SEARCH, seed=0)
    opts = TuningOptions(
        num_measure_trials=8,
        num_measures_per_round=4,
        builder=FakeBuilder(),
        runner=FakeRunner({"big": 1e-2, "small": 1e-3}),
    )
    scheduler.tune(opts)
    out = capsys.readouterr().out
    assert out.count("|  ID  | Latency (ms) | Speed (GFLOPS) | Trials |") == 2
    first_round = out.split("Estimated total latency")[0]
    assert "|    1 |            - |              - |      0 |" in first_round
    assert "Estimated total latency: - | Trials: 4 |" in out
    assert "Trials: 8 | Used time: " in out and "Next ID: " in out


def test_similar_tasks_share_a_tag() -> None:
    """The tasks of a real network: its two hidden layers (products with bias and
    ReLU, of other shapes) share a tag; the output layer (no ReLU) and a conv do not."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()

    def layer(x: Value, name: str, inputs: int, outputs: int, relu: bool = True) -> Value:
        weight = b.param(f"{name}_weight", rng.standard_normal((outputs, inputs), "float32"))
        bias = b.param(f"{name}_bias", rng.standard_normal(outputs, "float32"))
        y = b.add("add", [b.add("dense", [x, weight], name=name), bias])
        return b.add("relu", [y]) if relu else y

    hidden = layer(b.input("data", (1, 48)), "fc1", 48, 64)
    hidden = layer(hidden, "fc2", 64, 32)
    logits = layer(hidden, "fc3", 32, 10, relu=False)
    kernel = b.param("conv_weight", rng.standard_normal((8, 4, 3, 3), "float32"))
    attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NCHW", "OIHW")
    conv = b.add("relu", [b.add("conv", [b.input("image", (1, 4, 6, 6)), kernel], attrs)])
    graph, params = b.build([logits, conv])
    tasks, _ = extract_tasks(graph, params, "llvm -mcpu=skylake-avx512 -num-cores=2")
    hidden = [t for t in tasks if t.compute_dag.outputs[0].shape in [(1, 64), (1, 32)]]
    others = [t for t in tasks if t not in hidden]
    assert len(hidden) == 2 and len(others) == 2, [str(t.compute_dag) for t in tasks]
    fc1, fc2 = hidden
    assert fc1.workload_key != fc2.workload_key
    assert task_tag(fc1) == task_tag(fc2)
    assert task_tag(others[0]) != task_tag(others[1])
    assert all(task_tag(t) != task_tag(fc1) for t in others)


def test_bad_arguments_are_explained(tasks: list[SearchTask], tmp_path: Path) -> None:
    with pytest.raises(TuningError, match="no tasks to tune"):
        TaskScheduler([])
    with pytest.raises(TuningError, match="one positive weight per task"):
        TaskScheduler(tasks, [1])
    with pytest.raises(TuningError, match="unknown strategy 'fastest'"):
        TaskScheduler(tasks, strategy="fastest")
    with pytest.raises(TuningError, match="unknown cost model 'gbm'"):
        TaskScheduler(tasks, cost_model="gbm")
    with pytest.raises(TuningError, match="load_model_file needs cost_model='xgb'"):
        TaskScheduler(tasks, cost_model="random", load_model_file=tmp_path / "m.json")


def test_a_small_budget_gives_every_task_a_round() -> None:
    """Rounds shrink so that every task is tuned (TVM's rule), but not below 4."""
    many = [dense_relu_task(8, 16, 8 + n, f"t{n}") for n in range(6)]

    def rounds_of(trials: int, per_round: int) -> int:
        opts = TuningOptions(num_measure_trials=trials, num_measures_per_round=per_round)
        return round_size(opts, len(many))

    assert rounds_of(2000, 32) == 32  # enough for a full round each
    assert rounds_of(60, 32) == 10
    assert rounds_of(12, 32) == 4  # at least 4 ...
    assert rounds_of(12, 2) == 2  # ... unless asked for fewer
    scheduler = TaskScheduler(many, cost_model="random", search_params=SMALL_SEARCH, seed=0)
    result = scheduler.tune(options(60, FakeBuilder(), FakeRunner({}), num_measures_per_round=32))
    # First rounds of 8-10 (each task's FLOPs against the mean), then the rest.
    assert result.total_trials == 60 and all(trials >= 8 for trials in result.task_trials)


def test_first_rounds_follow_each_tasks_share_of_the_network() -> None:
    """A task with a sliver of the network gets a short first round: by FLOPs, or by
    its default's time in the network once a calibration measured it."""
    big, tiny = dense_relu_task(64, 64, 64, "big"), dense_relu_task(1, 8, 8, "tiny")
    scheduler = TaskScheduler([big, tiny], cost_model="random", search_params=SMALL_SEARCH)
    assert [scheduler.first_round_size(i, 32) for i in (0, 1)] == [32, 4]
    assert scheduler.first_round_size(1, 2) == 2  # never more than a round
    rounds: list[tuple[int | None, int]] = []
    scheduler.tune(options(36, FakeBuilder(), FakeRunner({}), num_measures_per_round=16,
                           measure_callbacks=[lambda records: rounds.append(
                               (records[0].task.flops, len(records)))]))  # fmt: skip
    assert rounds[:2] == [(big.flop_count, 16), (tiny.flop_count, 4)]
    # Measured in the network, the tiny task takes a third of the time (memory-bound).
    alone = {Timing.COLD_WEIGHTS: 1e-4}
    times = (TaskTimes(2e-4, alone), TaskTimes(1e-4, alone))
    scheduler.set_calibration(Calibration(Timing.COLD_WEIGHTS, times, (1, 1), 0.0, 3e-4))
    assert [scheduler.first_round_size(i, 32) for i in (0, 1)] == [32, 22]  # 32 x 2/3


def test_the_pretrained_cost_model_is_the_shipped_one_for_the_machine_class(
    tasks: list[SearchTask],
) -> None:
    # An x86 AVX-512 machine whatever the host is (the scheduler builds nothing here).
    avx512 = dataclasses.replace(tasks[0].hardware_params, vector_bytes=64)
    x86_target = Target("llvm -mtriple=x86_64-linux-gnu")
    x86 = [dataclasses.replace(t, target=x86_target, hardware_params=avx512) for t in tasks]
    scheduler = TaskScheduler(x86, cost_model="pretrained", seed=0)
    assert isinstance(scheduler.cost_model, XGBModel) and scheduler.cost_model.pretrained
    assert not scheduler.cost_model.trained  # its own trees come from this run's records
    with pytest.raises(TuningError, match="base_model_file with cost_model='xgb'"):
        TaskScheduler(x86, cost_model="pretrained", base_model_file="cm.npz")
    neon = dataclasses.replace(tasks[0].hardware_params, vector_bytes=16)
    arm_target = Target("llvm -mtriple=aarch64-linux-gnu")
    arm = dataclasses.replace(tasks[0], target=arm_target, hardware_params=neon)
    with pytest.raises(CostModelError, match=r"aarch64-128bit.*--warm-start"):
        TaskScheduler([arm], cost_model="pretrained")


def test_recalibration_measures_the_ratios_of_the_best_schedules(
    tasks: list[SearchTask],
) -> None:
    """Once every task has a best, and at each share of the budget, the profiler is
    given the bests so far, built, for the network with them; each task's ratio
    becomes its in-network time / its best's recorded cost."""
    scheduler = TaskScheduler(tasks, [3, 1], cost_model="random", search_params=SMALL_SEARCH)
    calls: list[tuple[float, ...]] = []

    def profiler(built: Mapping[int, BuildResult]) -> tuple[list[float], float]:
        assert sorted(built) == [0, 1] and all(library.ok for library in built.values())
        bests = tuple(tuner.best_cost for tuner in scheduler.tuners)
        calls.append(bests)
        return [1.5 * bests[0], 0.5 * bests[1]], 2e-3

    scheduler.set_network_profiler(profiler, at=(0.5, 1.0))
    runner = FakeRunner({"big": 1e-2, "small": 1e-3})
    result = scheduler.tune(options(32, FakeBuilder(), runner))
    # At the end of the warm-up (trial 8: both tasks have a best), then at 16 and 32.
    assert len(calls) == 3 and result.ratios == pytest.approx((1.5, 0.5))
    assert all(math.isfinite(cost) for cost in calls[0])
    assert result.untuned_seconds == 2e-3
    # The ratios were measured on the final bests, so the estimate is the network's.
    best = calls[-1]
    assert result.best_costs == best
    assert result.estimated_latency == pytest.approx(3 * 1.5 * best[0] + 0.5 * best[1] + 2e-3)

    # The machine has slowed down by half since the bests were timed: the profile says
    # so, and the estimate follows the network as it runs now: each ratio is on its
    # best's recorded scale (nothing is timed alone again).
    given: list[int] = []

    def slower(built: Mapping[int, BuildResult]) -> tuple[list[float], float]:
        given.append(len(built))
        return [3 * best[0], best[1]], 4e-3

    scheduler.set_network_profiler(slower)
    line = scheduler.recalibrate(FakeBuilder())
    assert scheduler.ratios == pytest.approx((3.0, 1.0))
    assert scheduler._estimate() == pytest.approx(3 * 3 * best[0] + best[1] + 4e-3)
    assert "in-network / recorded ratios 1.00-3.00" in line
    scheduler.recalibrate()  # without a builder: nothing built to give, the same ratios
    assert scheduler.ratios == pytest.approx((3.0, 1.0))
    assert given == [2, 0]

    def failing(built: Mapping[int, BuildResult]) -> tuple[list[float], float]:
        raise EmberError("no compiler")

    scheduler.set_network_profiler(failing)
    assert "skipped" in scheduler.recalibrate() and scheduler.ratios == pytest.approx((3.0, 1.0))
    with pytest.raises(TuningError, match="shares"):
        scheduler.set_network_profiler(failing, at=(0.0,))


def test_a_second_tune_call_builds_the_best_again_with_its_own_builder(
    tasks: list[SearchTask],
) -> None:
    # The first call's builder deletes its libraries when it closes: challengers in the
    # second call are timed beside a best built by the second call's builder.
    runner = FakeRunner({"big": 1e-2, "small": 1e-3})
    scheduler = TaskScheduler(tasks, cost_model="random", search_params=SMALL_SEARCH, seed=0)
    scheduler.tune(options(16, FakeBuilder(), runner))
    bests = {
        (task.desc, state_key(tuner.best_state))
        for task, tuner in zip(tasks, scheduler.tuners, strict=True)
        if tuner.best_state is not None
    }
    second = FakeBuilder()
    scheduler.tune(options(32, second, runner))
    # Deterministic (seed 0, fixed fake costs): some task's best is challenged.
    assert set(second.built) & bests

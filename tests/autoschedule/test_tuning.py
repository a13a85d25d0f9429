"""The single-task tuning loop (`tune_task`, `TaskTuner`, `apply_best`) with fake
measurers: costs are a fixed function of the state, so what the loop does with them
(budget, rounds, no state measured twice, wrong answers, resume) is asserted exactly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from fake_measure import SMALL_SEARCH, FakeBuilder, FakeRunner, dense_relu_task, state_factor

from ember.autoschedule import ErrorKind, RecordToFile, SearchTask, load_records
from ember.autoschedule.cost_model import RandomModel
from ember.autoschedule.measure import BuildResult, MeasureResult, Timing
from ember.autoschedule.records import MeasureRecord, state_key
from ember.autoschedule.runner import LocalRunner
from ember.autoschedule.tuning import (
    BESIDE_BEST_PAIRS,
    TaskTuner,
    TuningError,
    TuningOptions,
    apply_best,
    measurers,
)
from ember.schedule.state import State
from ember.schedule.steps import replay


def options(trials: int, per_round: int = 8, **kwargs: object) -> TuningOptions:
    return TuningOptions(
        num_measure_trials=trials,
        num_measures_per_round=per_round,
        builder=kwargs.pop("builder", FakeBuilder()),  # type: ignore[arg-type]
        runner=kwargs.pop("runner", FakeRunner()),  # type: ignore[arg-type]
        verbose=0,
        **kwargs,  # type: ignore[arg-type]
    )


def tune(task: SearchTask, opts: TuningOptions, **kwargs: object):  # type: ignore[no-untyped-def]
    from ember.autoschedule.tuning import tune_task

    return tune_task(task, opts, search_params=SMALL_SEARCH, seed=0, **kwargs)  # type: ignore[arg-type]


def test_the_budget_is_spent_in_rounds_and_no_state_is_measured_twice(tmp_path: Path) -> None:
    task = dense_relu_task()
    rounds: list[int] = []
    log = tmp_path / "log.json"
    builder = FakeBuilder()
    opts = options(
        30, builder=builder, measure_callbacks=[RecordToFile(log), lambda r: rounds.append(len(r))]
    )
    result = tune(task, opts)
    assert rounds == [8, 8, 8, 6]
    assert len(builder.built) == len(set(builder.keys)) == 30
    records = load_records(log)
    assert len(records) == 30
    best = min(records, key=lambda r: r.median_cost)
    assert result.best_cost == pytest.approx(best.median_cost)
    assert result.stats.trials == 30 and result.best_gflops > 0
    assert state_key(apply_best(task, log)) == state_key(result.best_state)  # type: ignore[arg-type]
    assert state_key(apply_best(task, records)) == state_key(result.best_state)  # type: ignore[arg-type]


def test_a_wrong_fastest_candidate_is_recorded_and_never_best() -> None:
    task = dense_relu_task()
    # Find what the first round measures, then rerun with its fastest made wrong.
    first = tune(task, options(8))
    assert first.best_state is not None
    wrong = state_key(first.best_state)
    runner = FakeRunner(wrong={wrong})
    records: list[MeasureRecord] = []
    second = tune(task, options(8, runner=runner, measure_callbacks=[records.extend]))
    assert second.best_state is not None and state_key(second.best_state) != wrong
    assert runner.checked[0] == wrong and len(runner.checked) == 2
    errors = [r for r in records if not r.is_valid]
    assert [r.result.error for r in errors] == [ErrorKind.WRONG_ANSWER]
    assert errors[0].result.message == "max abs error 1.0"
    assert second.stats.errors[ErrorKind.WRONG_ANSWER] == 1


def test_only_candidates_faster_than_the_best_are_checked() -> None:
    runner = FakeRunner()
    tune(dense_relu_task(), options(32, runner=runner))
    # At least the first round's best; never every candidate.
    assert 1 <= len(runner.checked) < 32


class LuckyRunner(FakeRunner):
    """FakeRunner, except that the first timing of the states in `lucky` reads a third
    of their cost (a timing that caught the machine at its best)."""

    def __init__(self, lucky: set[str]) -> None:
        super().__init__()
        self.lucky = lucky
        self.timed: list[str] = []

    def run(self, inputs, build_results):  # type: ignore[no-untyped-def]
        results = super().run(inputs, build_results)
        for index, measure_input in enumerate(inputs):
            key = state_key(measure_input.state)
            if key in self.lucky and key not in self.timed:
                results[index] = MeasureResult((results[index].costs[0] / 3,))
            self.timed.append(key)
        return results


def test_a_new_best_is_timed_again_and_keeps_the_second_timing() -> None:
    # The winner's curse: the slowest state of a round, timed lucky, looks fastest. It
    # is checked and timed again, its record keeps the second timing, and the truly
    # fastest state, checked and timed again in turn, is the best.
    task = dense_relu_task()
    records: list[MeasureRecord] = []
    plain = tune(task, options(8, measure_callbacks=[records.extend]))
    assert plain.best_state is not None

    def key(record: MeasureRecord) -> str:
        return state_key(replay(task.compute_dag, record.steps))

    slowest = max(records, key=lambda record: record.median_cost)
    runner = LuckyRunner({key(slowest)})
    again: list[MeasureRecord] = []
    result = tune(task, options(8, runner=runner, measure_callbacks=[again.extend]))
    assert result.best_cost == pytest.approx(plain.best_cost)
    assert runner.checked == [key(slowest), state_key(plain.best_state)]
    lucky = next(record for record in again if key(record) == key(slowest))
    assert lucky.median_cost == pytest.approx(slowest.median_cost)
    # Its first timing, its second alone (there was no best yet), then beside the truly
    # fastest, which challenged it.
    assert runner.timed.count(key(slowest)) == 2 + BESIDE_BEST_PAIRS


class SpeedingRunner(FakeRunner):
    """FakeRunner on a machine that runs everything twice as fast once the first
    `slow_timings` candidates have been timed (a neighbour stopped)."""

    def __init__(self, slow_timings: int) -> None:
        super().__init__()
        self.slow_timings = slow_timings
        self.timings = 0

    def run(self, inputs, build_results):  # type: ignore[no-untyped-def]
        results = super().run(inputs, build_results)
        for index in range(len(results)):
            self.timings += 1
            if self.timings > self.slow_timings:
                results[index] = MeasureResult((results[index].costs[0] / 2,))
        return results


def test_a_challenger_is_timed_beside_the_best_not_against_its_old_timing() -> None:
    # The first round (and its checks) runs slow, the rest fast: every later candidate
    # times faster than the first round's best. Timed beside the best, only the truly
    # faster ones win, and their records are on the best's scale.
    task = dense_relu_task()
    first_round = 8
    records: list[MeasureRecord] = []
    runner = SpeedingRunner(slow_timings=first_round + 1)  # the round and one re-timing
    result = tune(task, options(24, runner=runner, measure_callbacks=[records.extend]))
    assert result.best_state is not None
    measured = [replay(task.compute_dag, r.steps) for r in records]
    assert state_key(result.best_state) == state_key(min(measured, key=state_factor))
    assert result.best_cost == pytest.approx(1e-3 * state_factor(result.best_state))


class StallingRunner(FakeRunner):
    """FakeRunner on which the second of a pair (a challenger's best, timed beside it)
    reads `factors[i]` times its cost in the i-th pair, the factors in turn."""

    def __init__(self, factors: tuple[float, ...]) -> None:
        super().__init__()
        self.factors = factors
        self.pairs = 0

    def run(self, inputs, build_results):  # type: ignore[no-untyped-def]
        results = super().run(inputs, build_results)
        if len(results) == 2:
            factor = self.factors[self.pairs % len(self.factors)]
            results[1] = MeasureResult((results[1].costs[0] * factor,))
            self.pairs += 1
        return results


@pytest.mark.parametrize("factors", [(3.0, 1.0), (3.0, 1 / 3)])
def test_a_best_timed_far_off_its_record_does_not_scale_a_challenger(
    factors: tuple[float, float],
) -> None:
    # Scaled by a best that read 3x its cost (a stall), a challenger would be recorded
    # at a third of its cost, a best nothing beats. The pair is timed again: a second
    # timing near the record scales the challenger, one that disagrees with the first
    # leaves its costs as timed. Either way each record holds its state's cost. (A
    # speed change that both pairs agree on scales: the SpeedingRunner test above.)
    task = dense_relu_task()
    records: list[MeasureRecord] = []
    runner = StallingRunner(factors)
    result = tune(task, options(24, runner=runner, measure_callbacks=[records.extend]))
    assert runner.pairs >= 2 and runner.pairs % 2 == 0
    for record in records:
        state = replay(task.compute_dag, record.steps)
        assert record.median_cost == pytest.approx(1e-3 * state_factor(state))
    assert result.best_state is not None
    measured = [replay(task.compute_dag, r.steps) for r in records]
    assert state_key(result.best_state) == state_key(min(measured, key=state_factor))


def test_a_resumed_run_skips_what_the_log_measured(tmp_path: Path) -> None:
    task = dense_relu_task()
    log = tmp_path / "log.json"
    tune(task, options(16, measure_callbacks=[RecordToFile(log)]))
    builder = FakeBuilder()
    resumed = tune(task, options(16, builder=builder), load_log_file=log)

    def key(record: MeasureRecord) -> str:
        return json.dumps([s.to_json() for s in record.steps], separators=(",", ":"))

    records = load_records(log)
    first = {key(r) for r in records}
    # Nothing is measured again but the log's best, built again to time challengers
    # beside it.
    best = key(min(records, key=lambda r: r.median_cost))
    assert len(first) == 16 and first & set(builder.keys) <= {best}
    assert resumed.best_cost <= min(r.median_cost for r in load_records(log))


def test_records_of_another_compiler_family_only_teach_a_resumed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log measured with gcc, resumed where clang builds: its times say how gcc's
    code ran, so its states are not taken as measured and none is the best so far;
    the model learns from them all the same."""
    task = dense_relu_task()
    log = tmp_path / "log.json"
    tune(task, options(16, measure_callbacks=[RecordToFile(log)]))
    gcc = [
        dataclasses.replace(r, result=dataclasses.replace(r.result, compiler="gcc 12"))
        for r in load_records(log)
    ]
    learned: list[int] = []

    class Model(RandomModel):
        def update(self, inputs, results):  # type: ignore[no-untyped-def]
            learned.append(len(inputs))

    for building_with, measured_here in (("gcc 13", True), ("clang 19", False)):
        monkeypatch.setattr(
            "ember.autoschedule.tuning.compiler_identity", lambda t, c=building_with: c
        )
        tuner = TaskTuner(task, Model(0))
        assert tuner.load(gcc) == 16 and learned[-1] == 16
        assert (tuner.best_state is not None) is measured_here
        assert tuner.trials == (16 if measured_here else 0)
        keys = {state_key(replay(task.compute_dag, r.steps)) for r in gcc}
        if measured_here:
            assert keys <= tuner.search.measured
        else:
            assert not keys & tuner.search.measured


def test_early_stopping_ends_a_task_without_improvement() -> None:
    # The runner makes every candidate after the first round slower than the best (a
    # round times its batch in one call; a new best is timed again alone).
    class SlowerLater(FakeRunner):
        def run(self, inputs, build_results):  # type: ignore[no-untyped-def]
            results = super().run(inputs, build_results)
            self.rounds = getattr(self, "rounds", 0) + (len(inputs) > 1)
            scale = 1.0 if self.rounds == 1 else 10.0
            return [MeasureResult(tuple(c * scale for c in r.costs)) for r in results]

    result = tune(
        dense_relu_task(), options(200, per_round=4, runner=SlowerLater(), early_stopping=8)
    )
    assert result.stats.trials == 12  # 4 to find a best, then 8 without improvement


def test_tuner_rounds_are_usable_one_at_a_time() -> None:
    task = dense_relu_task()
    tuner = TaskTuner(task, search_params=SMALL_SEARCH, seed=1)
    records = tuner.round(5, FakeBuilder(), FakeRunner(), [])
    assert len(records) == 5 and tuner.trials == 5
    assert all(r.task.workload_key == task.workload_key and r.task.flops for r in records)
    assert tuner.best_state is not None


@pytest.mark.parametrize("timing", list(Timing))
def test_the_tuners_own_runner_times_as_the_options_say(timing: Timing) -> None:
    builder, runner, owned = measurers(TuningOptions(timing=timing))
    try:
        assert isinstance(runner, LocalRunner) and runner.timing is timing
        settings = (runner.number, runner.repeat, runner.min_repeat_ms)
        assert settings == timing.default_settings
    finally:
        for measurer in owned:
            measurer.close()
    assert len(owned) == 2 and builder in owned


def test_the_default_timing_is_cold_weights() -> None:
    _, runner, owned = measurers(TuningOptions())
    try:
        assert isinstance(runner, LocalRunner) and runner.timing is Timing.COLD_WEIGHTS
        assert (runner.number, runner.repeat, runner.min_repeat_ms) == (1, 10, 0.0)
    finally:
        for measurer in owned:
            measurer.close()


def test_bad_options_and_missing_records_are_explained(tmp_path: Path) -> None:
    with pytest.raises(TuningError, match="num_measure_trials must be a positive integer"):
        TuningOptions(num_measure_trials=0)
    with pytest.raises(TuningError, match="early_stopping"):
        TuningOptions(early_stopping=0)
    with pytest.raises(TuningError, match=r"timing must be a Timing \(Timing.WARM, "):
        TuningOptions(timing="cold-weights")  # type: ignore[arg-type]
    with pytest.raises(TuningError, match="set the timing on the runner you pass"):
        TuningOptions(runner=FakeRunner(), timing=Timing.COLD_WEIGHTS)
    task = dense_relu_task()
    with pytest.raises(TuningError, match="has no valid record for task dense_relu"):
        apply_best(task, [])


def code_of(state: State) -> str:
    """The fake "code" a state renders to: one of three, by its state's hash."""
    return f"code{int(state_factor(state) * 3) % 3}"


class SameCodeBuilder(FakeBuilder):
    """Renders every state to one of three "codes" (`code_of`), as a
    LocalBuilder given known code does: code known, or already in the call, comes back
    a duplicate, uncompiled. Remembers the known code of each call."""

    def __init__(self) -> None:
        super().__init__()
        self.known: list[set[str]] = []

    def build(self, inputs, known_code=None):  # type: ignore[no-untyped-def]
        assert known_code is not None, "the tuner passes the code it measured"
        self.known.append(set(known_code))
        seen = set(known_code)
        results = []
        for measure_input in inputs:
            key = code_of(measure_input.state)
            results.append(
                BuildResult(None, "", (), code_key=key, duplicate=True)
                if key in seen
                else BuildResult("/nonexistent/candidate.so", "k_packed", (), code_key=key)
            )
            seen.add(key)
        return results


class RecordingRunner(FakeRunner):
    def __init__(self) -> None:
        super().__init__()
        self.ran: list[str] = []

    def run(self, inputs, build_results):  # type: ignore[no-untyped-def]
        assert all(b.path is not None for b in build_results), "a duplicate was run"
        self.ran += [b.code_key for b in build_results]
        return [MeasureResult((1e-3 * int(b.code_key[-1]) + 1e-3,)) for b in build_results]


def test_a_candidate_with_the_code_of_a_measured_one_is_not_run_and_takes_its_time() -> None:
    """Different states that render the same code: the first of each code is run, the
    others take its time (their records say so) without being run; the next round's
    build is told the code measured so far."""
    task = dense_relu_task()
    tuner = TaskTuner(task, search_params=SMALL_SEARCH, seed=1)
    builder, runner = SameCodeBuilder(), RecordingRunner()
    records = tuner.round(8, builder, runner, [])
    assert len(records) == 8 and tuner.trials == 8
    codes = [code_of(replay(task.compute_dag, r.steps)) for r in records]
    # Each code ran (a new best also runs again beside the best); no duplicate did.
    assert set(runner.ran) == set(codes) and len(set(codes)) < 8
    for code, record in zip(codes, records, strict=True):
        assert record.median_cost == pytest.approx(1e-3 * int(code[-1]) + 1e-3)
    assert tuner.stats.same_code == 8 - len(set(codes))
    first_round = len(runner.ran)
    tuner.round(8, builder, runner, [])
    assert builder.known == [set(), set(codes)]
    assert set(runner.ran[first_round:]).isdisjoint(codes)

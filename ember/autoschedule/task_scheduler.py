"""Tuning a whole network: one trial budget spread over its tasks.

    tasks, weights = extract_tasks(graph, params, "llvm")
    scheduler = TaskScheduler(tasks, weights, load_log_file="old.json")
    result = scheduler.tune(TuningOptions(num_measure_trials=2000,
                                          measure_callbacks=[RecordToFile("new.json")]))

End-to-end latency is estimated as `sum(best_cost[t] * weight[t] * ratio[t])` plus the
steps no task covers, where a `Calibration` (`ember.autoschedule.calibration`) measured
each task's in-network / alone time ratio and those steps (without one: ratio 1,
nothing else). Every task first gets one round (a best to start from; a budget too
small for a full round per task shortens every round, `round_size`), as long as its
share of the network asks (`first_round_size`: EfficientNet-B0's 58 tasks in rounds of
32 took 1,856 of 2,000 trials, 32 of them for a squeeze-excite conv of 536 FLOPs and 0.1%
of the network); after that each
round goes to the task whose next round is expected to shorten that sum most
("gradient" strategy) or to the next task in turn ("round-robin"). The expected gain
of a task is its weight times its ratio times its expected improvement per trial, a
blend of
- the recent rate: how much its best improved over its last few rounds, per trial;
- an optimistic forecast: the best improves like 1/trials (best / trials per trial),
  or, when a similar task (same stages, other shapes) already runs at a higher
  throughput, the gap to half that throughput, whichever promises more.
A task stops when `early_stopping` trials found nothing better, or when its search
space is exhausted. A share of rounds (epsilon) goes to a random live task, so that a
wrong forecast cannot starve a task.

One cost model is shared by all tasks (what it learns on one conv helps the next).
After each round the seed's table is printed (ID | Latency | Speed | Trials, the
estimated total latency, trials, time used, and the next task). Ctrl-C ends the run
after the round in flight: the result says `interrupted`, and the records file
(RecordToFile) holds every finished round.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ember.autoschedule.calibration import Calibration, estimated_latency
from ember.autoschedule.cost_model import CostModel, RandomModel
from ember.autoschedule.measure import (
    Builder,
    BuildResult,
    MeasureInput,
    Runner,
    release,
)
from ember.autoschedule.records import load_records
from ember.autoschedule.search import SearchParams
from ember.autoschedule.task import SearchTask
from ember.autoschedule.tuning import (
    TaskTuner,
    TuningError,
    TuningOptions,
    TuningStats,
    measurers,
)
from ember.errors import EmberError
from ember.te.tensor import ComputeOp

STRATEGIES = ("gradient", "round-robin")
# Share of the recent rate in the expected improvement (the rest: the forecast).
RECENT_RATE_SHARE = 0.2
# Rounds the recent rate looks back over.
RECENT_ROUNDS = 3
# A similar task's throughput, divided by this, is what a task is forecast to reach.
SIMILAR_THROUGHPUT_DIVISOR = 2.0
# Share of rounds given to a random live task.
EPS_RANDOM_TASK = 0.05
# A task without a valid candidate after this many rounds is given up.
MAX_ROUNDS_WITHOUT_VALID = 3
# Shares of the trial budget after which a network profiler (set_network_profiler)
# re-measures the in-network / recorded ratios on the best schedules so far; it also does
# when the last task gets its first best (the estimate is defined from then on).
RECALIBRATE_AT = (0.4, 0.8)

# Given the best schedules so far built (task index -> its library, which may have
# failed to build; empty where the scheduler was given no builder), per task the
# in-network seconds per call of the network with those schedules, and the seconds of
# the steps no task covers.
NetworkProfiler = Callable[[Mapping[int, BuildResult]], tuple[Sequence[float], float]]


@dataclass(frozen=True)
class SchedulerResult:
    """The outcome of `TaskScheduler.tune`: per task its best mean cost (seconds, inf
    when none was valid) and trials; `history` holds one (total trials, seconds since
    the start, estimated latency in seconds) per round."""

    tasks: tuple[SearchTask, ...]
    weights: tuple[int, ...]
    best_costs: tuple[float, ...]
    task_trials: tuple[int, ...]
    elapsed: float
    interrupted: bool
    history: tuple[tuple[int, float, float], ...]
    stats: TuningStats = field(default_factory=TuningStats)
    # From a Calibration: per task, in-network / alone time; the steps no task covers.
    ratios: tuple[float, ...] = ()
    untuned_seconds: float = 0.0

    @property
    def total_trials(self) -> int:
        return sum(self.task_trials)

    @property
    def estimated_latency(self) -> float:
        """The network's latency in seconds, estimated from the tasks' bests (see
        `estimated_latency`); inf while a task has no valid candidate."""
        ratios = self.ratios or (1.0,) * len(self.tasks)
        return estimated_latency(self.best_costs, self.weights, ratios, self.untuned_seconds)


class TaskScheduler:
    """Tunes many tasks under one budget (see the module docstring).

    `cost_model`: "xgb" (the learned model, `ember.autoschedule.xgb_model`),
    "pretrained" (the same, warm-started from the model shipped for the tasks' machine
    class, `ember.autoschedule.pretrained`), "random", or a CostModel.
    `load_log_file`: records of an earlier run; their states are not measured again,
    each task starts from its best, and the model learns from them.
    `load_model_file`: a model saved by `XGBModel.save`, to start from.
    `base_model_file`: one (`ember records train`) to warm-start from: its trees score
    candidates from the first round and the online model learns corrections to them
    (`XGBModel.set_base`)."""

    def __init__(
        self,
        tasks: Sequence[SearchTask],
        task_weights: Sequence[int] | None = None,
        strategy: str = "gradient",
        load_model_file: str | os.PathLike[str] | None = None,
        load_log_file: str | os.PathLike[str] | None = None,
        cost_model: str | CostModel = "xgb",
        search_params: SearchParams | None = None,
        seed: int | None = None,
        calibration: Calibration | None = None,
        base_model_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if not tasks:
            raise TuningError("there are no tasks to tune; does the model have any kernel?")
        weights = list(task_weights) if task_weights is not None else [1] * len(tasks)
        if len(weights) != len(tasks) or any(w <= 0 for w in weights):
            raise TuningError(
                f"give one positive weight per task: {len(tasks)} tasks, weights {weights}"
            )
        if strategy not in STRATEGIES:
            raise TuningError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}")
        self.tasks = list(tasks)
        self.weights = weights
        self.ratios: tuple[float, ...] = (1.0,) * len(tasks)
        self.untuned_seconds = 0.0
        # Each task's default schedule's time in the network (a calibration's), which
        # sizes the first rounds; without one, FLOPs stand in for it.
        self._default_seconds: tuple[float, ...] = ()
        if calibration is not None:
            self.set_calibration(calibration)
        self.strategy = strategy
        self.rng = random.Random(seed)
        if cost_model == "pretrained":
            if base_model_file is not None:
                raise TuningError(
                    "cost_model='pretrained' warm-starts from the shipped model; give "
                    "base_model_file with cost_model='xgb' instead"
                )
            from ember.autoschedule.pretrained import pretrained_model_file

            base_model_file = pretrained_model_file(tasks[0].hardware_params, tasks[0].target)
            cost_model = "xgb"
        self.cost_model = _cost_model(cost_model, load_model_file, seed, base_model_file)
        self.tuners = [
            TaskTuner(task, self.cost_model, search_params, seed, weight=weight)
            for task, weight in zip(self.tasks, weights, strict=True)
        ]
        self.rounds = [0] * len(tasks)
        self.rounds_without_valid = [0] * len(tasks)
        self.history_of_best: list[list[tuple[int, float]]] = [[] for _ in tasks]
        self.done = [False] * len(tasks)
        self._profiler: NetworkProfiler | None = None
        self._recalibrate_at: list[float] = []
        self._recalibrate_after_warmup = False
        if load_log_file is not None:
            records = load_records(load_log_file)
            for tuner in self.tuners:
                tuner.load(records)

    def set_calibration(self, calibration: Calibration) -> None:
        """Estimate with `calibration`'s in-network / alone ratios and untuned steps."""
        if len(calibration.tasks) != len(self.tasks):
            raise TuningError(
                f"the calibration has {len(calibration.tasks)} tasks, the scheduler "
                f"{len(self.tasks)}: calibrate the same tasks"
            )
        self.ratios = calibration.ratios()
        self.untuned_seconds = calibration.untuned_seconds
        self._default_seconds = tuple(times.in_network for times in calibration.tasks)

    def set_network_profiler(
        self, profiler: NetworkProfiler, at: Sequence[float] = RECALIBRATE_AT
    ) -> None:
        """Re-measure the ratios during `tune`, once the trials pass each share `at` of
        the budget and once every task has a best (the end of the warm-up, where the
        estimate becomes defined: with 200 trials over 33 tasks that is the end of the
        run, and ratios measured before it covered too few tasks): `profiler` is given
        the best schedules so far, built, and profiles the network with them, and each
        task with a best gets ratio = its in-network time / its best's recorded cost
        (`recalibrate`). A calibration measures the default schedules' ratios, which
        tuned schedules do not keep (a stride-2 conv's default ran at 0.72-0.87x its
        lone time in the network, its tuned schedule at 1.1x): re-measured on the
        schedules the estimate sums, the ratios follow them. A profiler that fails
        (EmberError) leaves the ratios as they were."""
        if any(not 0 < share <= 1 for share in at):
            raise TuningError(f"recalibration points {list(at)} must be shares in (0, 1]")
        self._profiler = profiler
        self._recalibrate_at = sorted(at)
        self._recalibrate_after_warmup = True

    def recalibrate(self, builder: Builder | None = None) -> str:
        """Profile the network with the best schedules so far (`set_network_profiler`'s
        profiler; with a builder, given the bests built, to run them in its steps) and
        take its ratios; one line saying what changed. Each task's ratio is its time in
        the profile over its best's recorded cost, the scale every trial of the task is
        on (a challenger is recorded on its best's scale, `TaskTuner`): right after a
        recalibration the estimate is the profiled network's time, and a later best
        moves it by what it gained on the best alone. Bests timed alone again beside the
        profile gave ratios that kept each record's error instead: the fastest of a
        task's hundreds of noisy timings, and the drift of the machine since its task's
        first timing. A ResNet-18's recorded bests summed to 8% under the same bests
        timed alone again at the end, and its estimate came to 92% of the network."""
        if self._profiler is None:
            raise TuningError("no network profiler: call set_network_profiler first")
        before = self._estimate()
        bests = [(i, t.best_state) for i, t in enumerate(self.tuners) if t.best_state is not None]
        inputs = [MeasureInput(self.tasks[i], state) for i, state in bests]
        built = builder.build(inputs) if builder is not None else []
        try:
            libraries = (
                {index: library for (index, _), library in zip(bests, built, strict=True)}
                if built
                else {}
            )
            try:
                in_network, untuned = self._profiler(libraries)
            except EmberError as error:
                return f"Recalibration skipped: profiling the tuned network failed ({error})"
        finally:
            release(built)
        if len(in_network) != len(self.tasks):
            raise TuningError(
                f"the network profiler gave {len(in_network)} times for {len(self.tasks)} tasks"
            )
        ratios = list(self.ratios)
        for index, tuner in enumerate(self.tuners):
            recorded = tuner.best_cost
            if math.isfinite(recorded) and recorded > 0 and in_network[index] > 0:
                ratios[index] = in_network[index] / recorded
        self.ratios, self.untuned_seconds = tuple(ratios), untuned
        return (
            f"Recalibrated on the network with the best schedules so far: estimate "
            f"{_ms(before)} -> {_ms(self._estimate())} (in-network / recorded ratios "
            f"{min(ratios):.2f}-{max(ratios):.2f})"
        )

    # -- the loop ----------------------------------------------------------------------

    def tune(self, options: TuningOptions) -> SchedulerResult:
        """Tune until `options.num_measure_trials` trials (over all tasks), every task
        stopped, or Ctrl-C."""
        builder, runner, owned = measurers(options)
        started = time.perf_counter()
        history: list[tuple[int, float, float]] = []
        interrupted = False
        console = Console(highlight=False)
        progress = _progress_bar(console, options)
        trials = 0
        per_round = round_size(options, len(self.tasks))
        try:
            with progress:
                bar = progress.add_task("tuning", total=options.num_measure_trials)
                while trials < options.num_measure_trials:
                    index = self._next_task()
                    if index is None:
                        break
                    if self.rounds[index] == 0:
                        size = self.first_round_size(index, per_round)
                    else:
                        size = per_round
                    count = min(size, options.num_measure_trials - trials)
                    measured = self._round(index, count, builder, runner, options)
                    trials += measured
                    progress.update(bar, completed=trials)
                    elapsed = time.perf_counter() - started
                    due = [
                        share
                        for share in self._recalibrate_at
                        if trials >= share * options.num_measure_trials
                    ]
                    warmed_up = self._recalibrate_after_warmup and all(
                        math.isfinite(tuner.best_cost) for tuner in self.tuners
                    )
                    if (due or warmed_up) and self._profiler is not None:
                        self._recalibrate_at = self._recalibrate_at[len(due) :]
                        self._recalibrate_after_warmup &= not warmed_up
                        line = self.recalibrate(builder)
                        if options.verbose:
                            progress.console.print(line, soft_wrap=True)
                    history.append((trials, elapsed, self._estimate()))
                    if options.verbose:
                        next_index = self._next_task(peek=True)
                        for line in self.table(elapsed, trials, next_index):
                            progress.console.print(line, soft_wrap=True)
        except KeyboardInterrupt:
            interrupted = True
            console.print(
                f"Tuning stopped by Ctrl-C after {trials} trials; every finished round "
                "is in the records file.",
                soft_wrap=True,
            )
        finally:
            for measurer in owned:
                measurer.close()
            close_model = getattr(self.cost_model, "close", None)  # XGBModel's helpers
            if close_model is not None:
                close_model()
        return self._result(time.perf_counter() - started, interrupted, history)

    def _round(
        self, index: int, count: int, builder: Builder, runner: Runner, options: TuningOptions
    ) -> int:
        tuner = self.tuners[index]
        records = tuner.round(count, builder, runner, options.measure_callbacks)
        self.rounds[index] += 1
        self.history_of_best[index].append((tuner.trials, tuner.best_cost))
        self.rounds_without_valid[index] = (
            0 if math.isfinite(tuner.best_cost) else self.rounds_without_valid[index] + 1
        )
        stalled = bool(options.early_stopping) and (
            tuner.trials_since_improvement >= (options.early_stopping or 0)
        )
        if not records or stalled or self.rounds_without_valid[index] >= MAX_ROUNDS_WITHOUT_VALID:
            self.done[index] = True
        return len(records)

    def first_round_size(self, index: int, per_round: int) -> int:
        """Task `index`'s first round: `per_round` scaled by its share of the network
        against an even share (its weight times its default's time in the network from
        the calibration, else times its FLOPs), between MIN_MEASURES_PER_ROUND and
        `per_round`. A task whose first round shows it matters gets more rounds from
        the gradient, whose forecast favours tasks with few trials."""
        sizes = self._default_seconds or tuple(float(task.flop_count) for task in self.tasks)
        shares = [weight * size for weight, size in zip(self.weights, sizes, strict=True)]
        total = sum(shares)
        if not total > 0 or not math.isfinite(total):
            return per_round
        even = shares[index] / total * len(shares)
        least = min(MIN_MEASURES_PER_ROUND, per_round)
        return max(least, min(per_round, math.ceil(per_round * even)))

    # -- which task next ---------------------------------------------------------------

    def _next_task(self, peek: bool = False) -> int | None:
        """The task of the next round (None: all done). `peek` draws no randomness."""
        alive = [i for i in range(len(self.tasks)) if not self.done[i]]
        if not alive:
            return None
        for i in alive:  # warm-up: a first round for every task without a best, in order
            if self.rounds[i] == 0 and not math.isfinite(self.tuners[i].best_cost):
                return i
        if self.strategy == "round-robin":
            return min(alive, key=lambda i: (self.rounds[i], i))
        if not peek and self.rng.random() < EPS_RANDOM_TASK:
            return self.rng.choice(alive)
        return max(alive, key=lambda i: (self.expected_gain(i), -i))

    def expected_gain(self, index: int) -> float:
        """Expected shortening of the estimated latency per trial spent on task
        `index`, in seconds (see the module docstring)."""
        tuner = self.tuners[index]
        best = tuner.best_cost
        if not math.isfinite(best):
            return math.inf  # no valid candidate yet: the estimate is unbounded
        recent = self._recent_rate(index)
        forecast = best / max(tuner.trials, 1)
        similar = self._best_similar_throughput(index)
        if similar > 0:
            reachable = tuner.task.flop_count / (similar / SIMILAR_THROUGHPUT_DIVISOR)
            forecast = max(forecast, best - reachable)
        rate = RECENT_RATE_SHARE * recent + (1 - RECENT_RATE_SHARE) * forecast
        return self.weights[index] * self.ratios[index] * rate

    def _recent_rate(self, index: int) -> float:
        history = self.history_of_best[index]
        if len(history) <= RECENT_ROUNDS:
            return 0.0
        (old_trials, old_best), (trials, best) = history[-1 - RECENT_ROUNDS], history[-1]
        if not math.isfinite(old_best) or trials == old_trials:
            return 0.0
        return (old_best - best) / (trials - old_trials)

    def _best_similar_throughput(self, index: int) -> float:
        """The highest FLOP/s among other tasks with the same stages."""
        tag = task_tag(self.tasks[index])
        rates = [
            tuner.task.flop_count / tuner.best_cost
            for j, tuner in enumerate(self.tuners)
            if j != index and task_tag(tuner.task) == tag and math.isfinite(tuner.best_cost)
        ]
        return max(rates, default=0.0)

    # -- reporting ---------------------------------------------------------------------

    def _estimate(self) -> float:
        best_costs = [tuner.best_cost for tuner in self.tuners]
        return estimated_latency(best_costs, self.weights, self.ratios, self.untuned_seconds)

    def table(self, elapsed: float, trials: int, next_index: int | None) -> list[str]:
        """The seed's per-round table."""
        rule = "-" * 49
        lines = ["|  ID  | Latency (ms) | Speed (GFLOPS) | Trials |", rule]
        for index, tuner in enumerate(self.tuners):
            if math.isfinite(tuner.best_cost):
                latency = f"{tuner.best_cost * 1e3:12.4f}"
                speed = f"{tuner.task.flop_count / tuner.best_cost / 1e9:14.2f}"
            else:
                latency, speed = f"{'-':>12}", f"{'-':>14}"
            lines.append(f"| {index:4d} | {latency} | {speed} | {tuner.trials:6d} |")
        lines.append(rule)
        estimate = self._estimate()
        total = f"{estimate * 1e3:.3f} ms" if math.isfinite(estimate) else "-"
        after = "-" if next_index is None else str(next_index)
        lines.append(
            f"Estimated total latency: {total} | Trials: {trials} | "
            f"Used time: {elapsed:.0f} s | Next ID: {after}"
        )
        return lines

    def _result(
        self, elapsed: float, interrupted: bool, history: list[tuple[int, float, float]]
    ) -> SchedulerResult:
        stats = TuningStats()
        for tuner in self.tuners:
            stats.search += tuner.stats.search
            stats.build += tuner.stats.build
            stats.run += tuner.stats.run
            stats.check += tuner.stats.check
            stats.trials += tuner.stats.trials
            stats.same_code += tuner.stats.same_code
            stats.errors.update(tuner.stats.errors)
        return SchedulerResult(
            tuple(self.tasks),
            tuple(self.weights),
            tuple(t.best_cost for t in self.tuners),
            tuple(t.stats.trials for t in self.tuners),
            elapsed,
            interrupted,
            tuple(history),
            stats,
            self.ratios,
            self.untuned_seconds,
        )


def task_tag(task: SearchTask) -> str:
    """Tasks with the same tag compute the same stages on other shapes (two 3x3
    convs with bias and ReLU): what one reaches, the other may."""
    return ",".join(
        tensor.op.name for tensor in task.compute_dag.tensors if isinstance(tensor.op, ComputeOp)
    )


# The shortest round a small budget shortens rounds to: shorter ones measure too few
# candidates for what each round's search costs.
MIN_MEASURES_PER_ROUND = 4


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if math.isfinite(seconds) else "-"


def round_size(options: TuningOptions, num_tasks: int) -> int:
    """Measurements per round: `num_measures_per_round`, or fewer when the budget does
    not give every task one full round (200 trials over 19 tasks: rounds of 10, so that
    every task is tuned, not the first 7), but at least MIN_MEASURES_PER_ROUND."""
    fair_share = options.num_measure_trials // max(num_tasks, 1)
    if fair_share >= options.num_measures_per_round:
        return options.num_measures_per_round
    return max(fair_share, min(MIN_MEASURES_PER_ROUND, options.num_measures_per_round))


def _cost_model(
    choice: str | CostModel,
    load_model_file: str | os.PathLike[str] | None,
    seed: int | None,
    base_model_file: str | os.PathLike[str] | None = None,
) -> CostModel:
    if base_model_file is not None and choice != "xgb":
        raise TuningError("base_model_file needs cost_model='xgb' (it warm-starts an XGBModel)")
    if not isinstance(choice, str):
        if load_model_file is not None:
            raise TuningError("load_model_file needs cost_model='xgb' (it loads an XGBModel)")
        return choice
    if choice == "random":
        if load_model_file is not None:
            raise TuningError("load_model_file needs cost_model='xgb' (it loads an XGBModel)")
        return RandomModel(seed)
    if choice == "xgb":
        from ember.autoschedule.xgb_model import XGBModel

        model = XGBModel(seed=seed)
        if load_model_file is not None:
            model.load(load_model_file)
        if base_model_file is not None:
            model.set_base(base_model_file)
        return model
    raise TuningError(f"unknown cost model {choice!r}; choose 'xgb', 'pretrained' or 'random'")


def _progress_bar(console: Console, options: TuningOptions) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not options.verbose or not console.is_terminal,
    )

"""`ember tune MODEL --target T -o records.json`: search schedules for every task of a
model under one trial budget (`TaskScheduler`), appending each round's measurements
to the records file, then say what the search reached and the `ember compile` command
that uses it.

A killed or interrupted run loses at most the round in flight: `RecordToFile` makes
every round durable before the next one starts, so Ctrl-C ends the run with the log
intact (exit status 130, as a shell reports an interrupted command) and
`--tuning-records` resumes from it without measuring a schedule twice.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember.autoschedule.measure import Timing
from ember.cli_commands.common import (
    add_model_arguments,
    add_rpc_arguments,
    format_count,
    load_model,
    parse_shapes,
    rpc_tracker_address,
)
from ember.errors import EmberError, UsageError
from ember.target import Target

if TYPE_CHECKING:
    from ember.autoschedule.builder import LocalBuilder
    from ember.autoschedule.calibration import Calibration
    from ember.autoschedule.measure import Builder, BuildResult, Runner
    from ember.autoschedule.runner import TimingRunner
    from ember.autoschedule.task import SearchTask
    from ember.autoschedule.task_scheduler import NetworkProfiler, SchedulerResult, TaskScheduler
    from ember.autoschedule.tuning import TuningOptions
    from ember.graph.ir import Graph, Params
    from ember.runtime.module import Module

# Trials per task when --trials is not given: the first round of every task plus one
# more on average (rounds of 32). Enough to beat most default schedules; TVM's guide suggests
# ~800 per task for the best results.
DEFAULT_TRIALS_PER_TASK = 64
# --timing's default: calibrate (ember.autoschedule.calibration).
AUTO_TIMING = "auto"
# The end-of-run check runs each tuned task's fastest schedules (by the trials' lone
# times), this many, inside the network beside its default (check_in_network).
CHECK_CANDIDATES = 3
# A shell's exit status for a command ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


def _positive(value: int | float | None, option: str, what: str) -> None:
    if value is not None and not value > 0:
        raise UsageError(f"{option} {value} must be positive: {what}")


def _check_options(args: argparse.Namespace) -> None:
    """Everything the user can get wrong, before minutes of extraction and tuning."""
    _positive(args.trials, "--trials", "the total number of measurements over all tasks")
    _positive(args.per_round, "--per-round", "measurements per round of one task")
    _positive(args.early_stopping, "--early-stopping", "trials without a new best per task")
    _positive(args.timeout, "--timeout", "seconds a candidate may take to build or to run")
    _positive(args.number, "--number", "runs per timed repeat")
    _positive(args.repeat, "--repeat", "timed repeats per candidate")
    _positive(args.parallel, "--parallel", "builder processes")
    _measure_defaults(args)
    if args.min_repeat_ms is not None and args.min_repeat_ms < 0:
        raise UsageError(f"--min-repeat-ms {args.min_repeat_ms} must be 0 or more")
    output = Path(args.output)
    if output.is_dir():
        raise UsageError(f"-o {str(output)!r} is a directory; give the records file's name")
    parent = output.parent
    if not parent.is_dir():
        raise UsageError(f"-o {str(output)!r}: directory {str(parent)!r} does not exist")
    if not os.access(output if output.exists() else parent, os.W_OK):
        raise UsageError(f"-o {str(output)!r} is not writable; choose another records file")
    if args.warm_start and not Path(args.warm_start).is_file():
        raise UsageError(
            f"--warm-start {args.warm_start!r} does not exist; give a cost model file that "
            "`ember records train` wrote"
        )
    if args.tuning_records and not Path(args.tuning_records).is_file():
        raise UsageError(
            f"--tuning-records {args.tuning_records!r} does not exist; give the records "
            "file of an earlier `ember tune -o`, or leave the option out to start afresh"
        )


def _measure_defaults(args: argparse.Namespace) -> None:
    """--number, --repeat and --min-repeat-ms not given: the timing's defaults (warm
    takes the median of 5 repeats of 5 ms; cold timings measure 10 single runs, each
    after its eviction). With --timing auto, they are filled in once calibration chose."""
    if args.timing == AUTO_TIMING:
        return
    number, repeat, min_repeat_ms = Timing(args.timing).default_settings
    if args.number is None:
        args.number = number
    if args.repeat is None:
        args.repeat = repeat
    if args.min_repeat_ms is None:
        args.min_repeat_ms = min_repeat_ms


def _seconds(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def describe_tasks(tasks: Sequence[SearchTask], weights: Sequence[int]) -> list[str]:
    """One line per task: the ID the scheduler's table uses, name, FLOPs, weight."""
    width = max(len(task.desc) for task in tasks)
    lines = [f"  {'ID':>4}  {'task':<{width}}  {'FLOPs':>8}  weight"]
    for index, (task, weight) in enumerate(zip(tasks, weights, strict=True)):
        flops = format_count(task.flop_count)
        lines.append(f"  {index:>4}  {task.desc:<{width}}  {flops:>8}  {weight:>6}")
    return lines


def _next_command(args: argparse.Namespace) -> str:
    """The `ember compile` that uses these records, with the model options given."""
    argv = ["ember", "compile", args.model, "--target", args.target]
    if args.shapes:
        argv += ["--input-shapes", args.shapes]
    if args.batch_size != 1:
        argv += ["--batch-size", str(args.batch_size)]
    if args.layout != "NCHW":
        argv += ["--layout", args.layout]
    stem = Path(args.model).stem if args.model.endswith(".onnx") else args.model
    argv += ["--tuning-records", args.output, "-o", f"{stem}.tuned.tar"]
    return shlex.join(argv)


def describe_result(result: SchedulerResult, args: argparse.Namespace, new: int) -> list[str]:
    """The summary printed after tuning (see the module docstring)."""
    stats = result.stats
    lines = [
        f"Tuned {result.total_trials} trials over {len(result.tasks)} tasks in "
        f"{result.elapsed:.1f} s: search {stats.search:.1f} s, build {stats.build:.1f} s, "
        f"run {stats.run + stats.check:.1f} s (checking new bests {stats.check:.1f} s)"
    ]
    if stats.same_code:
        lines.append(
            f"  {stats.same_code} trials generated the code of a candidate measured before "
            "(its time reused, not compiled or run again)"
        )
    if stats.errors:
        errors = ", ".join(
            f"{kind.value} {count}"
            for kind, count in sorted(stats.errors.items(), key=lambda item: item[0].value)
        )
        lines.append(f"  failed candidates: {errors}")
    missing = [str(i) for i, cost in enumerate(result.best_costs) if not math.isfinite(cost)]
    if missing:
        lines.append(
            f"Estimated end-to-end latency: - (no valid schedule yet for task(s) "
            f"{', '.join(missing)}; tune longer)"
        )
    else:
        how = (
            "each task's best x weight x its in-network/alone ratio, plus the untuned steps"
            if result.ratios
            else "sum of each task's best latency x weight"
        )
        lines.append(f"Estimated end-to-end latency: {_seconds(result.estimated_latency)} ({how})")
    lines.append(f"Records: {args.output} ({new} new)")
    lines.append(f"Next: {_next_command(args)}")
    return lines


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(1 for line in file if line.strip())
    except OSError:
        return 0


def make_runner(args: argparse.Namespace) -> TimingRunner:
    """The runner the options ask for (after _check_options filled in the defaults):
    this machine, or the boards of --rpc-key behind --rpc-tracker."""
    from ember.autoschedule import LocalRunner

    timing = Timing.COLD_WEIGHTS if args.timing == AUTO_TIMING else Timing(args.timing)
    if args.rpc_tracker is None:
        return LocalRunner.for_timing(
            timing, args.number, args.repeat, args.min_repeat_ms, args.timeout
        )
    from ember.autoschedule.rpc_runner import RPCRunner

    host, port = rpc_tracker_address(args)
    return RPCRunner.for_timing(
        timing, args.rpc_key, host, port, args.number, args.repeat, args.min_repeat_ms,
        timeout=args.timeout, n_parallel=args.rpc_n_parallel, priority=args.rpc_priority,
        token_file=args.token_file,
    )  # fmt: skip


def _scheduler(
    args: argparse.Namespace,
    tasks: Sequence[SearchTask],
    weights: Sequence[int],
) -> TaskScheduler:
    from ember.autoschedule.task_scheduler import TaskScheduler

    try:
        return TaskScheduler(
            tasks,
            weights,
            strategy=args.strategy,
            load_log_file=args.tuning_records,
            cost_model=args.cost_model,
            seed=args.seed,
            base_model_file=args.warm_start,
        )
    except ImportError as error:
        raise UsageError(
            f"the {args.cost_model!r} cost model cannot be loaded ({error}); install Ember's "
            "dependencies (pip install -e .) or choose --cost-model random"
        ) from None


def _measurers(args: argparse.Namespace) -> tuple[LocalBuilder, TimingRunner]:
    from ember.autoschedule import LocalBuilder

    return LocalBuilder(n_parallel=args.parallel, timeout=args.timeout), make_runner(args)


def _options(
    args: argparse.Namespace, tasks: Sequence[SearchTask], builder: Builder, runner: Runner
) -> TuningOptions:
    from ember.autoschedule import RecordToFile, TuningOptions

    return TuningOptions(
        num_measure_trials=args.trials or DEFAULT_TRIALS_PER_TASK * len(tasks),
        num_measures_per_round=args.per_round,
        early_stopping=args.early_stopping,
        builder=builder,
        runner=runner,
        measure_callbacks=[RecordToFile(args.output)],
    )


def _calibrate(
    args: argparse.Namespace,
    graph: Graph,
    params: Params,
    tasks: Sequence[SearchTask],
    weights: Sequence[int],
    builder: LocalBuilder,
    runner: TimingRunner,
) -> tuple[Calibration, Module] | None:
    """With --timing auto: calibrate (ember.autoschedule.calibration), print what it
    measured and set the runner's timing; the user's --number/--repeat/--min-repeat-ms
    apply to the chosen timing. Returns the calibration and the network it ran (default
    schedules, inputs set), left open for the recalibrations and the last check to
    run candidates in; the caller closes it. None when the timing was given, or for
    boards (they are timed cold-weights: calibration runs the network on this
    machine)."""
    if args.timing != AUTO_TIMING:
        return None
    from ember.autoschedule.calibration import calibrate

    if args.rpc_tracker is not None or not tasks[0].target.is_host:
        # The network would have to run on a board; calibration runs it here.
        _without_calibration(
            args, runner, "--timing auto calibrates only where the network runs on this "
            "machine; give --timing to choose another for the boards",
        )  # fmt: skip
        return None
    print("Calibrating the timing: building the network with default schedules", flush=True)
    module = None
    try:
        module = _open_network(graph, params, tasks)
        print(f"Calibrating the timing: timing {len(tasks)} default schedules alone")
        calibration = calibrate(module, tasks, weights, builder, runner)
        print("\n".join(calibration.table()))
        _use_timing(args, runner, calibration.timing)
    except EmberError as error:  # tuning itself may still work, task by task
        if module is not None:
            module.close()
        _without_calibration(args, runner, f"the calibration failed: {error}")
        return None
    except BaseException:
        if module is not None:
            module.close()
        raise
    return calibration, module


def _without_calibration(args: argparse.Namespace, runner: TimingRunner, why: str) -> None:
    """Time cold-weights (the timing before calibration existed), saying why."""
    print(f"Timing: cold-weights ({why})", flush=True)
    _use_timing(args, runner, Timing.COLD_WEIGHTS)


def _use_timing(args: argparse.Namespace, runner: TimingRunner, timing: Timing) -> None:
    """Time as `timing` from now on, with the user's --number/--repeat/--min-repeat-ms
    where given and the timing's defaults for the rest."""
    args.timing = timing.value
    _measure_defaults(args)
    runner.set_timing(timing, args.number, args.repeat, args.min_repeat_ms)


def _tune(args: argparse.Namespace) -> int:
    from ember.autoschedule.task import extract_tasks

    target = Target(args.target)
    graph, params = load_model(args.model, parse_shapes(args.shapes), args.batch_size, args.layout)
    tasks, weights = extract_tasks(graph, params, target, args.include_simple_tasks)
    if not tasks:
        hint = "" if args.include_simple_tasks else "; --include-simple-tasks also tunes those"
        raise UsageError(
            f"{args.model} has no task to tune for target '{target}': no fused group has a "
            f"reduction{hint}"
        )
    total = sum(task.flop_count * weight for task, weight in zip(tasks, weights, strict=True))
    print(
        f"Extracted {len(tasks)} tasks from {sum(weights)} groups of {args.model} for target "
        f"'{target}', {format_count(total)} FLOPs in all:"
    )
    print("\n".join(describe_tasks(tasks, weights)))
    print(_compiler_line(target))
    scheduler = _scheduler(args, tasks, weights)  # first: it refuses a missing cost model
    builder, runner = _measurers(args)
    default_network: Module | None = None  # the calibration's, kept for the run
    calibrated_seconds: float | None = None  # that network's profile at the calibration
    try:
        calibrated = _calibrate(args, graph, params, tasks, weights, builder, runner)
        if calibrated is not None:
            calibration, default_network = calibrated
            calibrated_seconds = calibration.network_seconds
            scheduler.set_calibration(calibration)
            if args.tuning_records in (None, args.output):  # the bests are all in -o
                scheduler.set_network_profiler(
                    _network_profiler(graph, params, tasks, args, default_network)
                )
            else:  # neither recalibrations nor the check: no use for it
                default_network.close()
                default_network = None
    except BaseException:
        builder.close()
        runner.close()
        if default_network is not None:
            default_network.close()
        raise
    try:
        return _tune_and_check(
            args,
            graph,
            params,
            tasks,
            scheduler,
            builder,
            runner,
            default_network,
            calibrated_seconds,
        )
    finally:
        if default_network is not None:
            default_network.close()


def _compiler_line(target: Target) -> str:
    """Which compiler builds the candidates: records are the best schedules for it."""
    from ember.errors import ToolchainError
    from ember.toolchain import find_compiler

    try:
        compiler = find_compiler(target)
    except ToolchainError as error:
        return f"Compiler: none ({error})"
    choose = "; CC chooses another" if target.is_host else ""
    return (
        f"Compiler: {shlex.join(compiler.command)} ({compiler.version}); the records are the "
        f"best schedules for it{choose}"
    )


def _tune_and_check(
    args: argparse.Namespace,
    graph: Graph,
    params: Params,
    tasks: Sequence[SearchTask],
    scheduler: TaskScheduler,
    builder: LocalBuilder,
    runner: TimingRunner,
    default_network: Module | None,
    calibrated_seconds: float | None = None,
) -> int:
    """Tune (closing `builder` and `runner` after), print the outcome, then check the
    bests in the network (`check_in_network`, in `default_network` when given, which
    the calibration profiled in `calibrated_seconds`)."""
    options = _options(args, tasks, builder, runner)
    resumed = f", resuming from {args.tuning_records}" if args.tuning_records else ""
    from ember.autoschedule.task_scheduler import round_size

    per_round = round_size(options, len(tasks))
    shortened = (
        f" (of {options.num_measures_per_round}: every task gets a round)"
        if per_round < options.num_measures_per_round
        else ""
    )
    firsts = [scheduler.first_round_size(index, per_round) for index in range(len(tasks))]
    if min(firsts) < per_round:
        shortened += (
            f", first rounds of {min(firsts)}-{max(firsts)} by each task's share of the network"
        )
    print(
        f"Tuning {options.num_measure_trials} trials, {per_round} per round{shortened}, "
        f"strategy {args.strategy}, cost model {args.cost_model}{resumed}; "
        f"records go to {args.output}",
        flush=True,
    )
    before = _count_lines(Path(args.output))
    try:
        result = scheduler.tune(options)
    finally:
        builder.close()
        runner.close()
    print("\n".join(describe_result(result, args, _count_lines(Path(args.output)) - before)))
    if result.interrupted:
        print(f"Interrupted: resume with --tuning-records {args.output}", file=sys.stderr)
        return EXIT_INTERRUPTED
    # The check runs the network here, and compares the bests of -o (all of them,
    # unless the run resumed from another file). Without a calibration too: a busy
    # machine fails the calibration, not the alternating profiles.
    runs_here = args.rpc_tracker is None and tasks[0].target.is_host
    if runs_here and args.tuning_records in (None, args.output) and Path(args.output).exists():
        try:
            from ember.autoschedule import LocalBuilder

            with LocalBuilder(n_parallel=args.parallel, timeout=args.timeout) as checker:
                lines = check_in_network(
                    graph,
                    params,
                    tasks,
                    args.output,
                    result,
                    checker,
                    default_network,
                    calibrated_seconds,
                )
        except EmberError as error:  # the records stand as the trials left them
            lines = [
                f"The check in the network failed ({error}); the records keep the trials' bests"
            ]
        print("\n".join(lines))
    return 0


@contextlib.contextmanager
def _network(
    graph: Graph, params: Params, tasks: Sequence[SearchTask], tuning_records: str | None = None
) -> Iterator[Module]:
    """The network of `tasks` built (with `tuning_records`' best schedules, or the
    defaults) and loaded here, on random inputs; closed after."""
    module = _open_network(graph, params, tasks, tuning_records)
    try:
        yield module
    finally:
        module.close()


def _open_network(
    graph: Graph, params: Params, tasks: Sequence[SearchTask], tuning_records: str | None = None
) -> Module:
    """`_network`'s module, for the caller to close."""
    from ember import build
    from ember.autoschedule.calibration import set_random_inputs

    module = build(graph, tasks[0].target, params=params, tuning_records=tuning_records).load()
    try:
        set_random_inputs(module)
    except BaseException:
        module.close()
        raise
    return module


def profile_network(
    graph: Graph,
    params: Params,
    tasks: Sequence[SearchTask],
    tuning_records: str | None = None,
) -> tuple[list[float], float, float]:
    """`in_network_times` of the network (`_network`): per task its seconds per call,
    the seconds of the steps no task covers, and the total."""
    from ember.autoschedule.calibration import in_network_times

    with _network(graph, params, tasks, tuning_records) as module:
        return in_network_times(module, tasks)


def _network_profiler(
    graph: Graph,
    params: Params,
    tasks: Sequence[SearchTask],
    args: argparse.Namespace,
    default_network: Module,
) -> NetworkProfiler:
    """The scheduler's recalibration (TaskScheduler.set_network_profiler): profiles
    `default_network` with the bests, built by the tuning builder, run in their tasks'
    steps (`swapped_network_times`), rather than building the network again (~5 s of
    a core for ResNet-18, three times a run). Where a best cannot be swapped in (it
    did not build, or its steps write slices of a concatenation) or the swapped
    profile fails, the network is built with the records written so far."""
    from ember.autoschedule.calibration import swapped_network_times

    def profiler(bests: Mapping[int, BuildResult]) -> tuple[list[float], float]:
        if bests:
            # Any failure here (a library that does not load, a profile that fails)
            # leaves the steps their own kernels: the records' network is the answer.
            with contextlib.suppress(EmberError):
                in_network, untuned, _ = swapped_network_times(default_network, tasks, bests)
                return in_network, untuned
        in_network, untuned, _ = profile_network(graph, params, tasks, args.output)
        return in_network, untuned

    return profiler


def check_in_network(
    graph: Graph,
    params: Params,
    tasks: Sequence[SearchTask],
    records: str,
    result: SchedulerResult,
    builder: Builder,
    default_network: Module | None = None,
    calibrated_seconds: float | None = None,
) -> list[str]:
    """Which schedule each tuned task runs, decided inside the network. A schedule
    that wins alone can lose there (ViT-B/16: the 2000-trial bests ran 9% slower in
    the network than the defaults; ResNet-18: 4 of 12 candidates 3% faster than the
    default alone were not in the network), so the network is built with the default
    schedules and each tuned task's steps run, in turn, its default schedule and the
    trials' CHECK_CANDIDATES fastest distinct schedules (by their lone times), each
    built by the tuning builder (`swapped_in_network_times`). Each one's time there
    goes into the records as an in-network record, so that `ember compile` builds each
    task with whichever ran fastest in the network
    (`ember.autoschedule.records.distill`). Then the network built with the records is
    profiled in alternation with the default one. A task whose schedules do not all
    build, or whose steps cannot take a kernel built alone (it writes slices of a
    concatenation), or whose timing fails, keeps the trials' best. Where the default
    network's profile moved from the calibration's (`calibrated_seconds`) by more than
    DRIFT_TOLERANCE, a last line says the machine's speed moved (`drift_line`).
    Returns the lines to print."""
    from ember.autoschedule.calibration import drift_line, swapped_in_network_times
    from ember.autoschedule.measure import MeasureInput, release
    from ember.autoschedule.records import (
        MeasureRecord,
        RecordResult,
        RecordToFile,
        fastest_trials,
        steps_key,
    )
    from ember.schedule import replay
    from ember.schedule.default import default_schedule
    from ember.schedule.steps import Step
    from ember.toolchain import compiler_identity

    print(
        f"Checking the tuned schedules in the network: each tuned task's {CHECK_CANDIDATES} "
        "fastest schedules and its default, run in its steps in turn",
        flush=True,
    )
    # The candidates measured with this build's compiler family: a log resumed across
    # compilers holds the other's times, which say how its code ran.
    building_with = compiler_identity(tasks[0].target) if tasks else ""
    fastest = fastest_trials(
        records, [task.workload_key for task in tasks], CHECK_CANDIDATES, building_with
    )
    checked: list[int] = []
    fastest_there: dict[int, float] = {}  # checked task -> its fastest time in the network
    defaults: list[int] = []
    unchecked: list[str] = []
    new_records: list[MeasureRecord] = []
    given = None if default_network is None else contextlib.nullcontext(default_network)
    with given or _network(graph, params, tasks) as default:
        for index, task in enumerate(tasks):
            default_state = default_schedule(task.compute_dag, task.target)
            default_steps: tuple[Step, ...] = tuple(default_state.steps)  # type: ignore[arg-type]
            tuned = [r for r in fastest[index] if steps_key(r.steps) != steps_key(default_steps)]
            if not tuned:
                continue
            schedules = [default_steps, *(record.steps for record in tuned)]
            try:
                inputs = [MeasureInput(task, replay(task.compute_dag, s)) for s in schedules]
                built = builder.build(inputs)
                try:
                    if not all(library.ok for library in built):
                        unchecked.append(f"{index} (a schedule did not build)")
                        continue
                    seconds = swapped_in_network_times(default, tasks, index, built)
                finally:
                    release(built)
            except EmberError as error:
                unchecked.append(f"{index} ({error})")
                continue
            checked.append(index)
            fastest_there[index] = min(seconds)
            if min(range(len(seconds)), key=seconds.__getitem__) == 0:
                defaults.append(index)
            new_records += [
                MeasureRecord(
                    tuned[0].task,
                    steps,
                    RecordResult((time,), in_network=True, compiler=building_with),
                )
                for steps, time in zip(schedules, seconds, strict=True)
            ]
        RecordToFile(records).write(new_records)
        with _network(graph, params, tasks, records) as chosen:
            (_, chosen_total), (_, default_total) = _alternate_profiles((chosen, default), tasks)
    trials_estimate, estimate = result.estimated_latency, _checked_estimate(result, fastest_there)
    kept = f" (ID {', '.join(map(str, defaults))})" if defaults else ""
    lines = [
        f"{len(checked)} tuned tasks checked in the network: {len(checked) - len(defaults)} "
        f"run a tuned schedule, {len(defaults)} ran fastest with their default{kept} (the "
        "records now say so: in-network records)",
    ]
    if unchecked:
        lines.append(f"Not checked, the trials' bests kept: ID {', '.join(unchecked)}")
    if math.isfinite(estimate):
        lines.append(
            f"Estimated end-to-end latency after the check: {_seconds(estimate)} (each "
            "checked task's fastest schedule in the network x weight, the others' best x "
            "weight x ratio, plus the untuned steps)"
        )
    of_estimate = ""
    if math.isfinite(trials_estimate):
        of_estimate = f"; the trials' estimate is {trials_estimate / chosen_total * 100:.0f}% of it"
        if math.isfinite(estimate):
            of_estimate = (
                f"; the estimate is {estimate / chosen_total * 100:.0f}% of it (the trials' "
                f"{trials_estimate / chosen_total * 100:.0f}%)"
            )
    lines.append(
        f"Measured in the network: {_seconds(chosen_total)} with the chosen schedules, "
        f"against {_seconds(default_total)} with the default schedules profiled alternately "
        f"({default_total / chosen_total:.2f}x){of_estimate}"
    )
    drift = None if calibrated_seconds is None else drift_line(calibrated_seconds, default_total)
    return lines if drift is None else [*lines, drift]


def _checked_estimate(result: SchedulerResult, fastest_there: Mapping[int, float]) -> float:
    """The scheduler's estimate (`SchedulerResult.estimated_latency`) with the check's
    times: each checked task's term is its fastest schedule's time in the network
    (ratio 1), the others keep their best x ratio. inf without a calibration (no
    ratios or untuned steps: the trials' sum is not the network's time) and while a
    task has no best."""
    from ember.autoschedule.calibration import estimated_latency

    if not result.ratios:
        return math.inf
    costs, ratios = list(result.best_costs), list(result.ratios)
    for index, seconds in fastest_there.items():
        costs[index], ratios[index] = seconds, 1.0
    return estimated_latency(costs, result.weights, ratios, result.untuned_seconds)


def _alternate_profiles(
    modules: Sequence[Module], tasks: Sequence[SearchTask]
) -> list[tuple[list[float], float]]:
    """Per module, its tasks' in-network times and its total, profiled in turn with
    the others' (`alternating_in_network_times`)."""
    from ember.autoschedule.calibration import alternating_in_network_times

    timed = alternating_in_network_times(modules, tasks)
    return [(times, total) for times, _, total in timed]


def command_tune(args: argparse.Namespace) -> int:
    _check_options(args)
    started = time.perf_counter()
    try:
        return _tune(args)
    except KeyboardInterrupt:
        # Ctrl-C outside the scheduler's rounds (extraction, start-up, shutdown).
        elapsed = time.perf_counter() - started
        print(
            f"ember tune: interrupted after {elapsed:.1f} s; the finished rounds are in "
            f"{args.output}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def _add_tuning_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--trials",
        type=int,
        help=f"total measurements over all tasks "
        f"(default {DEFAULT_TRIALS_PER_TASK} x the number of tasks)",
    )
    add(
        "--per-round",
        type=int,
        default=32,
        help="measurements per round of a task (32: each round also pays for the search "
        "and a model update, ~2 s)",
    )
    add(
        "--early-stopping",
        type=int,
        metavar="TRIALS",
        help="stop a task after this many trials without a new best (default: never)",
    )
    add(
        "--strategy",
        choices=("gradient", "round-robin"),
        default="gradient",
        help="which task gets the next round (default gradient: the one expected to "
        "shorten the end-to-end estimate most)",
    )
    add(
        "--cost-model",
        choices=("xgb", "pretrained", "random"),
        default="xgb",
        help="what ranks candidates before measuring (default xgb, the learned model; "
        "pretrained: the same, warm-started from the model shipped for this machine class, "
        "which ranks well from the first round)",
    )
    add(
        "--warm-start",
        metavar="COST_MODEL",
        help="start the learned cost model from this one (`ember records train` on earlier "
        "records): it ranks candidates from the first round, where a new model ranks at "
        "random until it has measured enough",
    )
    add("--seed", type=int, help="seed of the search, for a repeatable run")
    add(
        "--include-simple-tasks",
        action="store_true",
        help="also tune groups without a reduction (layout transposes, reshapes, ...)",
    )


def _add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--timeout",
        type=float,
        default=15.0,
        help="seconds a candidate may take to build, and again to run (15)",
    )
    add(
        "--timing",
        choices=[AUTO_TIMING, *(timing.value for timing in Timing)],
        default=AUTO_TIMING,
        help="what the CPU caches hold when a candidate's timed run starts (default auto: "
        "the one whose times of the default schedules come closest to their times in the "
        "network, measured before tuning). cold-weights: all but the kernel's weights, "
        "evicted to memory before each run, as in a network: the input just written by "
        "the previous kernel, the weights streamed. warm: everything, from the run before (runs in "
        "a loop; flatters weight-streaming layers). cold: nothing, the caches flushed "
        "(misranks layers whose inputs are hot; BENCHMARKS.md)",
    )
    # TVM's name for cold timing, kept as an alias.
    add(
        "--cpu-cache-flush",
        dest="timing",
        action="store_const",
        const=Timing.COLD.value,
        help="the same as --timing cold",
    )
    add(
        "--no-cpu-cache-flush",
        dest="timing",
        action="store_const",
        const=Timing.WARM.value,
        help=argparse.SUPPRESS,
    )
    add("--number", type=int, help="runs per timed repeat (1; raised to last --min-repeat-ms)")
    add("--repeat", type=int, help="timed repeats per candidate (5 with warm timing, else 10)")
    add(
        "--min-repeat-ms",
        type=float,
        help="a repeat runs at least this long, raising --number (5 ms with warm timing, else 0)",
    )
    add("--parallel", type=int, help="builder processes (default: one per CPU)")
    add_rpc_arguments(parser)
    add(
        "--rpc-n-parallel",
        type=int,
        help="boards measuring at once (default: every board of the key at the start)",
    )
    add("--rpc-priority", type=int, default=1, help="the tracker serves higher first (1)")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "tune", help="search fast schedules for a model's tasks, logged as tuning records"
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--target", default="llvm", help="e.g. 'llvm', 'llvm -mcpu=znver4' (default llvm)"
    )
    parser.add_argument(
        "-o", "--output", required=True, help="records file; each round is appended to it"
    )
    parser.add_argument(
        "--tuning-records",
        metavar="PREV",
        help="records of an earlier run to resume from (may be the -o file): their "
        "schedules are not measured again and each task starts from its best",
    )
    _add_tuning_arguments(parser)
    _add_measure_arguments(parser)
    parser.set_defaults(run=command_tune)

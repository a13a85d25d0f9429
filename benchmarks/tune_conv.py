"""A single-task tuning run on ResNet-50's 3x3 conv 56x56x64 -> 64 (NHWC, bias + ReLU):
the search's best against the default schedule and ONNX Runtime.

    python benchmarks/tune_conv.py [--trials 500] [--per-round 32] [--threads 2]
                                   [--cost-model random] [--log conv.json] [--with-default]

The search starts from sketches only (the default schedule is not planted in the
population unless --with-default), so the run says whether the template-free search
space and the search find what the hand-written default schedule does. Candidates are
measured by LocalBuilder / LocalRunner, as `task.tune` does. At the end the best state
and the default schedule are timed again side by side with ONNX Runtime (same thread
count, alternating blocks, medians), and the run prints the best GFLOP/s against the
machine's measured fp32 peak and where the tuning time went (search / build / run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence

import numpy as np
from kernel_gflops import _conv, _onnxruntime_session
from peak import measure_peak

from ember.autoschedule import MeasureRecord, RecordToFile, SearchTask, extract_tasks
from ember.autoschedule.builder import LocalBuilder
from ember.autoschedule.cost_model import RandomModel
from ember.autoschedule.measure import MeasureInput, release
from ember.autoschedule.runner import LocalRunner
from ember.autoschedule.tuning import TuningOptions, apply_best, tune_task
from ember.schedule.default import default_schedule
from ember.schedule.state import State

SHAPE = (56, 56, 64, 64, 3, 1, 1, 1, "relu")
SETTLE_SECONDS = 0.2


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--per-round", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cost-model", choices=["random"], default="random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", default="", help="records file to append (default: none)")
    parser.add_argument("--with-default", action="store_true", help="seed the default schedule")
    parser.add_argument("--repeat", type=int, default=10, help="timed blocks in the final check")
    parser.add_argument(
        "--measure-only", default="", help="skip tuning: compare the best state of this log"
    )
    return parser.parse_args()


def _time_side_by_side(
    task: SearchTask, states: dict[str, State], threads: int, repeat: int
) -> dict[str, float]:
    """Median seconds per run of each state and of ONNX Runtime, measured in
    alternating blocks."""
    workload = _conv(SHAPE)
    runner = LocalRunner(number=5, repeat=1, min_repeat_ms=50)
    builder = LocalBuilder()
    inputs = [MeasureInput(task, state) for state in states.values()]
    built = builder.build(inputs)
    session = _onnxruntime_session(workload.graph, workload.params, threads)
    rng = np.random.default_rng(0)
    feed = {v.name: rng.standard_normal(v.shape).astype("float32") for v in workload.graph.inputs}
    names = list(states)
    times: dict[str, list[float]] = {name: [] for name in [*names, "onnxruntime"]}
    try:
        for block in range(repeat):
            # Alternate the order too: whichever runs first may find a core busy.
            order = list(range(len(inputs)))
            if block % 2:
                order.reverse()
            results = runner.run([inputs[i] for i in order], [built[i] for i in order])
            for index, result in zip(order, results, strict=True):
                times[names[index]].append(result.median_cost)
            # An idle thread pool (OpenMP's in the runner, ONNX Runtime's here) spins
            # for a while after its last call and would steal a core from the other.
            time.sleep(SETTLE_SECONDS)
            session.run(None, feed)  # type: ignore[attr-defined]
            start = time.perf_counter()
            runs = 0
            while time.perf_counter() - start < 0.05:
                session.run(None, feed)  # type: ignore[attr-defined]
                runs += 1
            times["onnxruntime"].append((time.perf_counter() - start) / runs)
            time.sleep(SETTLE_SECONDS)
    finally:
        release(built)
        runner.close()
        builder.close()
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    args = _parse()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    workload = _conv(SHAPE)
    tasks, _ = extract_tasks(workload.graph, workload.params, f"llvm -num-cores={args.threads}")
    (task,) = tasks
    print(f"task: {task.desc}, {task.flop_count / 1e6:.1f} MFLOP, {args.threads} thread(s)")
    best = apply_best(task, args.measure_only) if args.measure_only else _tune(task, args)
    default = default_schedule(task.compute_dag, task.target)
    medians = _time_side_by_side(
        task, {"tuned": best, "default": default}, args.threads, args.repeat
    )
    peak = measure_peak(args.threads)
    for name, seconds in medians.items():
        gflops = task.flop_count / seconds / 1e9
        print(
            f"{name:12s} {seconds * 1e3:7.3f} ms  {gflops:6.1f} GFLOP/s "
            f"({100 * gflops / peak:4.1f}% of the {peak:.0f} GFLOP/s peak)"
        )
    print(
        f"tuned / default time: {medians['tuned'] / medians['default']:.2f}   "
        f"tuned / onnxruntime time: {medians['tuned'] / medians['onnxruntime']:.2f}"
    )


def _tune(task: SearchTask, args: argparse.Namespace) -> State:
    """The tuning run; prints its progress, time split and best-so-far curve."""
    callbacks = [RecordToFile(args.log)] if args.log else []
    curve: list[tuple[int, float]] = []

    def track(records: Sequence[MeasureRecord]) -> None:
        best = min([r.median_cost for r in records] + [curve[-1][1] if curve else float("inf")])
        curve.append(((curve[-1][0] if curve else 0) + len(records), best))

    with LocalBuilder() as builder, LocalRunner(number=3, min_repeat_ms=20) as runner:
        options = TuningOptions(
            num_measure_trials=args.trials,
            num_measures_per_round=args.per_round,
            builder=builder,
            runner=runner,
            measure_callbacks=[*callbacks, track],
        )
        started = time.perf_counter()
        result = tune_task(
            task,
            options,
            RandomModel(args.seed),
            seed=args.seed,
            include_default_schedule=args.with_default,
        )
        wall = time.perf_counter() - started
    if result.best_state is None:
        sys.exit("no valid candidate was found")
    stats = result.stats
    print(f"\ntuning: {stats.trials} trials in {wall:.0f} s; errors: {dict(stats.errors)}")
    run = stats.run + stats.check
    print(
        f"time split: search {stats.search:.1f} s ({100 * stats.search / wall:.0f}%), "
        f"build {stats.build:.1f} s ({100 * stats.build / wall:.0f}%), "
        f"run {run:.1f} s ({100 * run / wall:.0f}%)"
    )
    step = max(1, len(curve) // 8)
    points = [f"{n}: {task.flop_count / cost / 1e9:.0f}" for n, cost in curve[::step]]
    print("best-so-far GFLOP/s by trials: " + ", ".join(points))
    return result.best_state


if __name__ == "__main__":
    main()

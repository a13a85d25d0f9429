"""Do the tuning's lone-time gains hold inside the network? Each of MODEL's largest
tasks gets its fastest candidates of a tuning log timed twice against the task's
default schedule: alone (the tuner's timing) and inside the network.

    python benchmarks/in_network_candidates.py MODEL LOG [--top 4] [--tasks 8]
        [--rounds 5] [--timing cold-weights] [--threads 2]

The network is built with its default schedules and profiled with one task's steps
running a candidate's kernel instead of their own (`Module.set_step_kernel`): the
default schedule and the log's `--top` fastest distinct schedules of the task (by the
log's lone times), each built by the tuning builder, taken in turn, `--rounds` times
(each candidate's least time over the rounds, so that drift falls on all alike).
Alone, the same libraries are timed by the tuning runner (`--timing`), `--rounds`
times in turn. Printed per candidate: its time / the default's, alone and in the
network; then how often a candidate faster alone by 3% or more was faster in the
network too, and the rank correlation (Kendall's tau) of the two ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an .onnx file or a built-in workload")
    parser.add_argument("log", help="a tuning log of MODEL")
    parser.add_argument("--top", type=int, default=4, help="candidates per task")
    parser.add_argument("--tasks", type=int, default=8, help="the largest tasks, by time")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timing", default="cold-weights", help="the lone timing")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from ember import build
    from ember.autoschedule import LocalBuilder, LocalRunner, Timing, extract_tasks
    from ember.autoschedule.calibration import (
        CalibrationError,
        in_network_times,
        set_random_inputs,
        swapped_in_network_times,
    )
    from ember.autoschedule.measure import MeasureInput, release
    from ember.autoschedule.records import fastest_trials
    from ember.cli_commands.common import load_model
    from ember.schedule import replay
    from ember.schedule.default import default_schedule

    graph, params = load_model(args.model)
    tasks, weights = extract_tasks(graph, params, "llvm")
    module = build(graph, "llvm", params=params).load()
    set_random_inputs(module)
    in_network, _, total = in_network_times(module, tasks)
    print(f"{Path(args.model).name}: the network with default schedules, {total * 1e3:.3f} ms")
    order = sorted(range(len(tasks)), key=lambda i: -weights[i] * in_network[i])
    chosen = order[: args.tasks]
    fastest = fastest_trials(args.log, [tasks[i].workload_key for i in chosen], args.top)

    lone_ratios: list[float] = []
    network_ratios: list[float] = []
    with LocalBuilder() as builder, LocalRunner.for_timing(Timing(args.timing)) as runner:
        for index, records in zip(chosen, fastest, strict=True):
            task = tasks[index]
            states = [default_schedule(task.compute_dag, task.target)] + [
                replay(task.compute_dag, record.steps) for record in records
            ]
            inputs = [MeasureInput(task, state) for state in states]
            built = builder.build(inputs)
            try:
                alone = _alone(runner, inputs, built, args.rounds)
                inside = swapped_in_network_times(module, tasks, index, built, args.rounds, 10)
            except CalibrationError as error:  # a candidate that did not build, views
                print(f"{task.desc}: skipped ({error})")
                continue
            finally:
                release(built)
            share = weights[index] * in_network[index] / total
            print(
                f"{task.desc} ({share:.0%} of the network): default {alone[0] * 1e6:.0f} us "
                f"alone, {inside[0] * 1e6:.0f} us in the network"
            )
            for rank, (lone, net) in enumerate(zip(alone[1:], inside[1:], strict=True), 1):
                lone_ratios.append(lone / alone[0])
                network_ratios.append(net / inside[0])
                print(
                    f"  #{rank}: alone {lone_ratios[-1]:.3f}, in the network "
                    f"{network_ratios[-1]:.3f} of the default"
                )
    faster = [net for lone, net in zip(lone_ratios, network_ratios, strict=True) if lone <= 0.97]
    held = sum(net <= 0.97 for net in faster)
    print(
        f"{len(faster)} of {len(lone_ratios)} candidates were 3% or more faster than the "
        f"default alone; {held} of those were in the network too (median in-network ratio "
        f"{statistics.median(faster) if faster else float('nan'):.3f})"
    )
    if len(lone_ratios) > 2:
        tau = _kendall_tau(lone_ratios, network_ratios)
        print(f"Kendall tau of the alone and in-network ratios: {tau:.2f}")


def _kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs."""
    pairs = [(i, j) for i in range(len(xs)) for j in range(i + 1, len(xs))]
    signs = [(xs[i] - xs[j]) * (ys[i] - ys[j]) for i, j in pairs]
    return (sum(s > 0 for s in signs) - sum(s < 0 for s in signs)) / len(pairs)


def _alone(runner, inputs, built, rounds: int) -> list[float]:  # type: ignore[no-untyped-def]
    """Each library's least median time alone over `rounds` runs of them all in turn."""
    best = [float("inf")] * len(inputs)
    for _ in range(rounds):
        for position, result in enumerate(runner.run(inputs, built)):
            if result.ok:
                best[position] = min(best[position], result.median_cost)
    return best


if __name__ == "__main__":
    main()

"""Per task, does the estimate hold? The in-network / alone ratio of each task's default
schedule against what its tuned schedule does in the network.

    python benchmarks/tuned_tasks.py MODEL RECORDS [--repeat 30]

MODEL is an .onnx file or a built-in workload; RECORDS an `ember tune -o` log for it.
Builds the network with default schedules and with the records, profiles the two in
alternation (a few runs each, in turn: the machine's drift falls on both), calibrates
from the first profile as `ember tune --timing auto` does (each default timed alone
under every timing). Per task: the default's time in the network
and alone (cold-weights / warm / cold), its ratio under the chosen timing, the best
time alone in the records, the prediction (best x ratio), the tuned schedule's measured
time in the network, and prediction / measured; then each task's in-network speed,
default and tuned, as a share of this machine's fp32 FMA peak (benchmarks/peak.py, at
the tasks' thread count): what the search improved, and how far each is from the limit.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import ember
from ember.autoschedule import LocalBuilder, LocalRunner, extract_tasks, load_records
from ember.autoschedule.calibration import (
    TIMING_PREFERENCE,
    calibrate,
    in_network_times,
    set_random_inputs,
)
from ember.cli_commands.common import load_model, parse_shapes
from ember.runtime.module import Module, ModuleInfo
from ember.runtime.profile import Profile

sys.path.insert(0, str(Path(__file__).parent))
from peak import measure_peak


@dataclass(frozen=True)
class MedianProfile:
    """A module's info and the per-step medians of its profiles (ProfiledModule)."""

    info: ModuleInfo
    medians: Profile

    def profile(self, repeat: int = 10) -> Profile:
        return self.medians


def alternate_profiles(
    modules: Sequence[Module], repeat: int, block: int = 3
) -> list[MedianProfile]:
    """Profile `modules` in turn, `block` runs each, until each has `repeat` runs; the
    median of each step over the blocks' medians."""
    seconds: list[list[list[float]]] = [[] for _ in modules]
    for _ in range(max(1, repeat // block)):
        for module, samples in zip(modules, seconds, strict=True):
            samples.append([row.seconds for row in module.profile(repeat=block).rows])
    profiles = []
    for module, samples in zip(modules, seconds, strict=True):
        rows = module.profile(repeat=1).rows
        medians = [statistics.median(column) for column in zip(*samples, strict=True)]
        names, kernels = [row.group for row in rows], [row.kernel for row in rows]
        median = Profile.from_steps(names, kernels, medians, module.info.groups, repeat)
        profiles.append(MedianProfile(module.info, median))
    return profiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("records")
    parser.add_argument("--repeat", type=int, default=30, help="profiled runs (30)")
    parser.add_argument("--input-shapes", help="as for ember tune")
    args = parser.parse_args()
    graph, params = load_model(args.model, parse_shapes(args.input_shapes))
    tasks, weights = extract_tasks(graph, params, "llvm")
    untuned = ember.build(graph, "llvm", params=params).load()
    tuned = ember.build(graph, "llvm", params=params, tuning_records=args.records).load()
    set_random_inputs(untuned)
    set_random_inputs(tuned)
    # Profiled in alternation, a few runs at a time: the machine's drift over the
    # minutes of the run falls on both alike.
    untuned_profile, tuned_profile = alternate_profiles([untuned, tuned], args.repeat)
    untuned.close()
    tuned.close()
    with LocalBuilder() as builder, LocalRunner() as runner:
        calibration = calibrate(untuned_profile, tasks, weights, builder, runner, args.repeat)
    print("\n".join(calibration.table()))
    measured, _, _ = in_network_times(tuned_profile, tasks, args.repeat)
    best: dict[str, float] = defaultdict(lambda: math.inf)
    for record in load_records(args.records):
        best[record.task.workload_key] = min(best[record.task.workload_key], record.median_cost)
    print(
        f"{'task':28s} {'w':>2s} {'net def':>8s} {'alone def (cw/warm/cold)':>26s} "
        f"{'ratio':>6s} {'best':>8s} {'pred net':>8s} {'meas net':>8s} {'pred/meas':>9s}"
    )
    sums: dict[str, float] = defaultdict(float)
    ratios = calibration.ratios()
    rows = zip(tasks, weights, calibration.tasks, ratios, measured, strict=True)
    for task, weight, times, ratio, in_network in rows:
        lone = best[task.workload_key]
        predicted = lone * ratio
        alone = "/".join(f"{times.alone.get(t, math.nan) * 1e3:.4f}" for t in TIMING_PREFERENCE)
        print(
            f"{task.desc[:28]:28s} {weight:2d} {times.in_network * 1e3:8.4f} {alone:>26s} "
            f"{ratio:6.2f} {lone * 1e3:8.4f} {predicted * 1e3:8.4f} {in_network * 1e3:8.4f} "
            f"{predicted / in_network:9.3f}"
        )
        sums["default in network"] += weight * times.in_network
        sums["default alone"] += weight * times.alone.get(calibration.timing, math.nan)
        sums["best alone"] += weight * lone
        sums["predicted"] += weight * predicted
        sums["measured"] += weight * in_network
    print("; ".join(f"{name} {value * 1e3:.3f} ms" for name, value in sums.items()))
    peak = measure_peak(tasks[0].hardware_params.num_cores)
    print(f"\nIn the network, as a share of the fp32 FMA peak ({peak:.0f} GFLOP/s):")
    print(f"{'task':28s} {'GFLOP':>7s} {'default':>8s} {'tuned':>8s} {'gain':>6s}")
    for task, times, in_network in zip(tasks, calibration.tasks, measured, strict=True):
        default = task.flop_count / times.in_network * 1e-9 / peak
        tuned = task.flop_count / in_network * 1e-9 / peak
        print(
            f"{task.desc[:28]:28s} {task.flop_count * 1e-9:7.3f} {default:8.1%} {tuned:8.1%} "
            f"{times.in_network / in_network:6.2f}"
        )


if __name__ == "__main__":
    main()

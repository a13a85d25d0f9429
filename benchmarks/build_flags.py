"""What a tuning candidate's build costs, and what compiler flags would save: each
candidate lowered and rendered, then compiled with every flag variant and timed alone.

    python benchmarks/build_flags.py [MODEL] [--tasks 4] [--per-task 12] [--records LOG]
        [--variants=-O3,-O2,"-O2 -fno-ivopts"]

Takes MODEL's (default resnet-18) largest tasks, samples `--per-task` random candidates
of each (the tuner's first-round sampler; with --records, random records of a tuning
log of MODEL instead: the evolved candidates a run spends most of its builds on), and
for each flag variant (the toolchain's
-O3 flags with -O2 and/or -fno-ivopts added last, which override; `CC=gcc` or
`CC=clang-19` in a variant builds with that compiler instead; -fno-ivopts is GCC's and
clang ignores it) reports the median
wall time of lowering + rendering + compiling + linking one candidate, and the
candidates' kernel times (cold-weights timing, the LocalRunner) relative to -O3's:
median and geometric mean of the per-candidate ratios. Lowering and rendering alone
are timed separately once per candidate.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from ember.autoschedule import LocalRunner, Timing, extract_tasks, load_records
from ember.autoschedule.annotate import sample_initial_population
from ember.autoschedule.builder import KERNEL_NAME
from ember.autoschedule.measure import ArgSpec, BuildResult, MeasureInput
from ember.autoschedule.sketch import generate_sketches
from ember.backend import generate_kernel
from ember.cli_commands.common import load_model
from ember.schedule import replay
from ember.schedule.lower import lower
from ember.toolchain import Compiler, find_compiler

VARIANTS = {
    "-O3": [],
    "-O2": ["-O2"],
    "-O3 -fno-ivopts": ["-fno-ivopts"],
    "-O2 -fno-ivopts": ["-O2", "-fno-ivopts"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="resnet-18")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--per-task", type=int, default=12)
    parser.add_argument("--records", help="take the candidates from this tuning log")
    parser.add_argument(
        "--variants", help="comma-separated flag sets to compare (the first is the reference)"
    )
    args = parser.parse_args()
    variants = VARIANTS
    if args.variants:
        names = [name.strip() for name in args.variants.split(",")]
        variants = {name: name.split() for name in names}
        variants[names[0]] = []  # the reference: the toolchain's own flags
    graph, params = load_model(args.model)
    tasks, _ = extract_tasks(graph, params, "llvm")
    tasks = sorted(tasks, key=lambda task: -task.flop_count)[: args.tasks]
    compiler = find_compiler("llvm")
    work = Path(tempfile.mkdtemp(prefix="ember-flags-"))
    reference = next(iter(variants))
    build_times: dict[str, list[float]] = {name: [] for name in variants}
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    recorded = _recorded(args.records, tasks) if args.records else {}
    lowering: list[float] = []
    with LocalRunner.for_timing(Timing.COLD_WEIGHTS) as runner:
        for number, task in enumerate(tasks):
            rng = random.Random(number)
            if args.records:
                states = rng.sample(recorded[task.workload_key], args.per_task)
            else:
                sketches = generate_sketches(task)
                states = sample_initial_population(task, sketches, args.per_task, rng)
            inputs = [MeasureInput(task, state) for state in states]
            costs: dict[str, list[float]] = {}
            for variant, (name, flags) in enumerate(variants.items()):
                built = []
                for index, state in enumerate(states):
                    library = work / f"{number}-{index}-{variant}.so"
                    start = time.perf_counter()
                    kernel = generate_kernel(lower(state, KERNEL_NAME), "llvm")
                    if name == reference:
                        lowering.append(time.perf_counter() - start)
                    source = library.with_suffix(".c")
                    source.write_text(kernel.source)
                    argv = _argv(compiler, flags, "-shared", str(source), "-o", str(library))
                    subprocess.run(argv, check=True, capture_output=True)
                    build_times[name].append(time.perf_counter() - start)
                    arguments = tuple(
                        ArgSpec(
                            tuple(int(n) for n in buffer.shape),
                            buffer.dtype,
                            buffer in kernel.outputs,
                            position in task.weight_inputs,
                        )
                        for position, buffer in enumerate(kernel.args)
                    )
                    built.append(BuildResult(str(library), kernel.packed_symbol, arguments))
                costs[name] = [result.median_cost for result in runner.run(inputs, built)]
            for name in variants:
                ratios[name] += [
                    cost / base for cost, base in zip(costs[name], costs[reference], strict=True)
                    if cost < float("inf") and base < float("inf")
                ]  # fmt: skip
            print(task.desc, {name: f"{min(c) * 1e3:.3f} ms" for name, c in costs.items()})
    print(f"lower + render: median {statistics.median(lowering) * 1e3:.0f} ms")
    for name in variants:
        print(
            f"{name:16s} build median {statistics.median(build_times[name]) * 1e3:.0f} ms; "
            f"kernel time / {reference}: median {statistics.median(ratios[name]):.3f}, "
            f"geometric mean {statistics.geometric_mean(ratios[name]):.3f}"
        )


def _argv(compiler: Compiler, flags: list[str], *rest: str) -> list[str]:
    """The toolchain's command line with a variant's flags last; a `CC=...` flag
    swaps the compiler (as `$CC` would: the toolchain's flags for its family)."""
    swapped = [flag.removeprefix("CC=") for flag in flags if flag.startswith("CC=")]
    if swapped:
        saved = os.environ.get("CC")
        os.environ["CC"] = swapped[-1]
        try:
            compiler = find_compiler("llvm")
        finally:
            if saved is None:
                del os.environ["CC"]
            else:
                os.environ["CC"] = saved
    return compiler.argv(*rest, *(flag for flag in flags if not flag.startswith("CC=")))


def _recorded(log: str, tasks: list) -> dict[str, list]:  # type: ignore[type-arg]
    """Per task (workload key): the states of the log's valid records of it."""
    by_key = {task.workload_key: task for task in tasks}
    states: dict[str, list] = {key: [] for key in by_key}  # type: ignore[type-arg]
    for record in load_records(log):
        task = by_key.get(record.task.workload_key)
        if task is not None and record.is_valid:
            states[task.workload_key].append(replay(task.compute_dag, record.steps))
    return states


if __name__ == "__main__":
    main()

"""What a warm timing setting costs per candidate, and how well it agrees with itself:
evolved candidates of a tuning log, timed twice under each setting, in turn.

    python benchmarks/timing_settings.py MODEL RECORDS [--tasks 6] [--per-task 12]
        [--settings "3,1,100;1,5,5"]

Takes MODEL's largest tasks and `--per-task` random valid records of each from RECORDS
(an `ember tune -o` log of MODEL: the candidates a run spends its time on), builds them
once, then times every task's candidates under each setting (number, repeat,
min_repeat_ms of a warm LocalRunner), the settings in turn, in two passes. Per setting:
wall time per candidate; between its two passes, the median (and least) per-task
Spearman rank correlation and the median |time ratio - 1|; against the first
setting's first pass, the rank correlation and median time ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).parent))
from build_flags import _recorded

from ember.autoschedule import LocalBuilder, LocalRunner, extract_tasks
from ember.autoschedule.measure import MeasureInput, release
from ember.cli_commands.common import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("records")
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--per-task", type=int, default=12)
    parser.add_argument(
        "--settings",
        default="3,1,100;1,5,5",
        help="number,repeat,min_repeat_ms;... (the first is the reference)",
    )
    args = parser.parse_args()
    settings = {}
    for text in args.settings.split(";"):
        number, repeat, min_repeat_ms = text.split(",")
        settings[text] = (int(number), int(repeat), float(min_repeat_ms))
    graph, params = load_model(args.model)
    tasks, _ = extract_tasks(graph, params, "llvm")
    tasks = sorted(tasks, key=lambda task: -task.flop_count)[: args.tasks]
    recorded = _recorded(args.records, tasks)
    runners = {name: LocalRunner(*values) for name, values in settings.items()}
    wall = dict.fromkeys(settings, 0.0)
    costs: dict[str, list[list[list[float]]]] = {name: [[], []] for name in settings}
    with LocalBuilder() as builder:
        groups = []
        for number, task in enumerate(tasks):
            states = recorded[task.workload_key]
            chosen = random.Random(number).sample(states, min(args.per_task, len(states)))
            inputs = [MeasureInput(task, state) for state in chosen]
            groups.append((inputs, builder.build(inputs)))
        try:
            for timed_pass in range(2):
                for inputs, built in groups:
                    for name, runner in runners.items():
                        start = time.perf_counter()
                        results = runner.run(inputs, built)
                        wall[name] += time.perf_counter() - start
                        costs[name][timed_pass].append([r.median_cost for r in results])
        finally:
            for runner in runners.values():
                runner.close()
            for _, built in groups:
                release(built)
    count = sum(len(inputs) for inputs, _ in groups)
    reference = next(iter(settings))
    print(f"{count} candidates of {len(groups)} tasks; per setting (number,repeat,ms):")
    for name in settings:
        first, second = costs[name]
        rhos = [spearmanr(a, b)[0] for a, b in zip(first, second, strict=True)]
        drift = [
            abs(x / y - 1)
            for a, b in zip(first, second, strict=True)
            for x, y in zip(a, b, strict=True)
        ]
        versus = [spearmanr(a, b)[0] for a, b in zip(second, costs[reference][0], strict=True)]
        ratio = [
            x / y
            for a, b in zip(second, costs[reference][1], strict=True)
            for x, y in zip(a, b, strict=True)
        ]
        print(
            f"  {name:>12}: {wall[name] / 2 / count * 1e3:.0f} ms a candidate; pass to pass: "
            f"Spearman median {statistics.median(rhos):.3f} (least {min(rhos):.3f}), "
            f"|ratio - 1| median {statistics.median(drift):.3f}; against {reference}: "
            f"Spearman {statistics.median(versus):.3f}, time ratio "
            f"{statistics.median(ratio):.3f}"
        )


if __name__ == "__main__":
    main()

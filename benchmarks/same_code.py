"""How many of a tuning log's trials generated the code of an earlier trial of their
task (what the tuner now neither compiles nor runs again), and what lowering and
rendering cost a candidate.

    python benchmarks/same_code.py MODEL RECORDS [--limit 400]

Replays the first `--limit` trial records of MODEL's tasks in RECORDS (an `ember tune
-o` log), lowers and renders each as the builder does, and counts those whose C source
equals an earlier record's of the same task (`ember.autoschedule.builder.code_key`).
Logs written since the tuner skips such candidates show them as repeated times.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from ember.autoschedule import extract_tasks, load_records
from ember.autoschedule.builder import KERNEL_NAME, code_key
from ember.backend import generate_kernel
from ember.cli_commands.common import load_model
from ember.schedule import replay
from ember.schedule.lower import lower


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("records")
    parser.add_argument("--limit", type=int, default=400)
    args = parser.parse_args()
    graph, params = load_model(args.model)
    tasks, _ = extract_tasks(graph, params, "llvm")
    by_key = {task.workload_key: task for task in tasks}
    seen: defaultdict[str, set[str]] = defaultdict(set)
    repeated = count = 0
    lowering: list[float] = []
    rendering: list[float] = []
    for record in load_records(args.records):
        task = by_key.get(record.task.workload_key)
        if task is None or not record.is_trial:
            continue
        if count == args.limit:
            break
        count += 1
        state = replay(task.compute_dag, record.steps)
        start = time.perf_counter()
        func = lower(state, KERNEL_NAME)
        lowered = time.perf_counter()
        kernel = generate_kernel(func, task.target)
        rendering.append(time.perf_counter() - lowered)
        lowering.append(lowered - start)
        key = code_key(kernel.source)
        repeated += key in seen[task.workload_key]
        seen[task.workload_key].add(key)
    if not count:
        raise SystemExit(f"{args.records} has no trial records of {args.model}'s tasks")
    print(
        f"{count} trials: {repeated} ({repeated / count:.1%}) generated the code of an earlier "
        f"trial of their task; a candidate's lowering {statistics.median(lowering) * 1e3:.1f} "
        f"ms, rendering {statistics.median(rendering) * 1e3:.1f} ms (medians)"
    )


if __name__ == "__main__":
    main()

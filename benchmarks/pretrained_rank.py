"""How well does a pretrained cost model rank schedules it never saw? Per task of a
held-out records file: Kendall's tau between the model's scores and the measured
throughputs (1 / time) of the task's valid records, and how often the model's top 10%
holds the task's best.

    python benchmarks/pretrained_rank.py COST_MODEL LOG --model MODEL [--input-shapes S]

COST_MODEL is a file `ember records train` wrote (or "pretrained": the one shipped for
this machine class); LOG the records of MODEL's tuning, which the cost model should
not have been trained on. Prints one row per task (records, tau, best in top 10%) and
the mean tau weighted by records; a random ranking has tau 0.
"""

from __future__ import annotations

import argparse

import numpy as np

from ember.autoschedule import extract_tasks, load_records
from ember.autoschedule.pretrained import pretrained_model_file
from ember.autoschedule.xgb_model import XGBModel
from ember.cli_commands.common import load_model, parse_shapes
from ember.schedule import replay


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs."""
    i, j = np.triu_indices(len(a), 1)
    return float(np.mean(np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cost_model")
    parser.add_argument("log")
    parser.add_argument("--model", required=True)
    parser.add_argument("--input-shapes")
    parser.add_argument("--target", default="llvm")
    args = parser.parse_args()
    graph, params = load_model(args.model, parse_shapes(args.input_shapes))
    tasks, _ = extract_tasks(graph, params, args.target, include_simple_tasks=True)
    by_key = {task.workload_key: task for task in tasks}
    path = args.cost_model
    if path == "pretrained":
        path = pretrained_model_file(tasks[0].hardware_params, tasks[0].target)
    model = XGBModel(seed=0)
    model.set_base(path)
    records: dict[str, list] = {}
    for record in load_records(args.log):
        if record.task.workload_key in by_key and record.is_valid:
            records.setdefault(record.task.workload_key, []).append(record)
    taus, counts, hits = [], [], 0
    print(f"{'task':40s} {'records':>8s} {'tau':>6s} {'best in top 10%':>16s}")
    try:
        for key, task_records in records.items():
            if len(task_records) < 8:
                continue
            task = by_key[key]
            states = [replay(task.compute_dag, r.steps) for r in task_records]
            scores = model.predict(task, states)
            throughput = np.array([1.0 / r.median_cost for r in task_records])
            tau = kendall_tau(scores, throughput)
            top = np.argsort(-scores)[: max(1, len(scores) // 10)]
            hit = int(np.argmax(throughput) in top)
            taus.append(tau)
            counts.append(len(task_records))
            hits += hit
            found = "yes" if hit else "no"
            print(f"{task.desc[:40]:40s} {len(task_records):8d} {tau:6.2f} {found:>16s}")
    finally:
        model.close()
    mean = float(np.average(taus, weights=counts))
    print(f"{len(taus)} tasks: mean tau {mean:.3f} (weighted by records); best in the top 10% "
          f"for {hits} of {len(taus)}")  # fmt: skip


if __name__ == "__main__":
    main()

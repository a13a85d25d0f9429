"""A network tuned for real (LocalBuilder + LocalRunner, a short budget) builds with
its records into a library whose every tuned kernel came from the log, and the library
computes what ONNX Runtime computes (fp32: rtol 1e-4, atol 1e-5, as for every network)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from library_abi import run_library

import ember
from ember.autoschedule import (
    LocalBuilder,
    LocalRunner,
    RecordToFile,
    TaskScheduler,
    TuningOptions,
    extract_tasks,
    load_records,
)
from ember.autoschedule.search import SearchParams
from ember.testing import get_workload, to_onnx
from ember.testing.oracle import ATOL, RTOL, run_onnxruntime


def test_a_tuned_resnet_matches_onnxruntime(tmp_path: Path) -> None:
    graph, params = get_workload("resnet-18", image_shape=(3, 32, 32))
    tasks, weights = extract_tasks(graph, params, "llvm")
    log = tmp_path / "resnet18.json"
    with LocalBuilder() as builder, LocalRunner(number=1, min_repeat_ms=1) as runner:
        scheduler = TaskScheduler(
            tasks,
            weights,
            cost_model="random",
            search_params=SearchParams(population=16, generations=1),
            seed=0,
        )
        result = scheduler.tune(
            TuningOptions(
                num_measure_trials=3 * len(tasks),
                num_measures_per_round=3,
                builder=builder,
                runner=runner,
                measure_callbacks=[RecordToFile(log)],
                verbose=0,
            )
        )
    assert result.task_trials == (3,) * len(tasks)
    assert all(np.isfinite(result.best_costs))
    assert len(load_records(log)) == 3 * len(tasks)

    library = ember.build(graph, "llvm", params=params, tuning_records=log)
    keys = {task.workload_key for task in tasks}
    schedules = {g["workload_key"]: g["schedule"] for g in library.metadata["groups"]}  # type: ignore[attr-defined, index]
    assert all(schedules[key] == "tuned" for key in keys)
    image = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    (ours,) = run_library(library, {"data": image})
    (theirs,) = run_onnxruntime(to_onnx(graph, params), {"data": image}).values()
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)

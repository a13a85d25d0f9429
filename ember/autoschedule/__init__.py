"""The auto-scheduler: search over States for each task of a network, measured on the
device and logged as tuning records.

    tasks, weights = extract_tasks(graph, params, "llvm")
    task = tasks[0]
    tune_task(task, TuningOptions(num_measure_trials=200, measure_callbacks=[RecordToFile(log)]))
    state = apply_best(task, log)
    lib = ember.build(graph, "llvm", params=params, tuning_records=log)

The pipeline of one round, one module each: `sketch` (template-free search space) ->
`annotate` (random tile sizes, parallel / vector / unroll annotations) -> `search`
(evolutionary search guided by a `cost_model`, with `mutate`; the learned model's
`features` extracted on every core by `feature_pool`) -> `builder` ->
`runner` (measurement in worker processes, checked against `reference`) -> `records`
(the log); `tuning` runs the rounds of one task, `task_scheduler` those of a network.

Imports go one way, from data to drivers (tests/test_imports.py checks that there is
no cycle); each module imports only from those before it:
`hardware`, `records`, `task`, `worker` (plain data, the helper-process protocol) ->
`measure` (what a measurement passes around; the Builder and Runner protocols) ->
`cost_model`, `features`, `feature_pool`, `xgb_model` -> `sketch_rules`, `sketch`,
`annotate`, `mutate` -> `search` -> `reference`, `builder`, `runner`, `rpc_runner` (with
`ember.rpc`) -> `tuning` -> `calibration` (with `ember.runtime`) -> `task_scheduler`,
and the helper processes' `*_worker` modules. A module that needs a type from further on
takes a protocol defined before it instead.
"""

from typing import TYPE_CHECKING

from ember.lazy import lazy_exports

if TYPE_CHECKING:  # what __getattr__ imports, spelled out for type checkers
    from ember.autoschedule.builder import LocalBuilder
    from ember.autoschedule.calibration import Calibration, calibrate
    from ember.autoschedule.cost_model import CostModel, RandomModel
    from ember.autoschedule.hardware import HardwareParams
    from ember.autoschedule.measure import BuildResult, MeasureInput, MeasureResult, Timing
    from ember.autoschedule.records import (
        ApplyHistoryBest,
        ErrorKind,
        MeasureRecord,
        RecordResult,
        RecordsError,
        RecordTask,
        RecordToFile,
        distill,
        load_best,
        load_records,
    )
    from ember.autoschedule.rpc_runner import RPCRunner
    from ember.autoschedule.runner import LocalRunner
    from ember.autoschedule.search import EvolutionarySearch, SearchParams
    from ember.autoschedule.sketch import Sketch, generate_sketches
    from ember.autoschedule.task import SearchTask, extract_tasks
    from ember.autoschedule.task_scheduler import SchedulerResult, TaskScheduler
    from ember.autoschedule.tuning import (
        TaskTuner,
        TuneResult,
        TuningError,
        TuningOptions,
        apply_best,
        tune_task,
    )

_NAMES = {
    "ApplyHistoryBest": "ember.autoschedule.records",
    "BuildResult": "ember.autoschedule.measure",
    "Calibration": "ember.autoschedule.calibration",
    "CostModel": "ember.autoschedule.cost_model",
    "ErrorKind": "ember.autoschedule.records",
    "EvolutionarySearch": "ember.autoschedule.search",
    "HardwareParams": "ember.autoschedule.hardware",
    "LocalBuilder": "ember.autoschedule.builder",
    "LocalRunner": "ember.autoschedule.runner",
    "RPCRunner": "ember.autoschedule.rpc_runner",
    "MeasureInput": "ember.autoschedule.measure",
    "MeasureRecord": "ember.autoschedule.records",
    "MeasureResult": "ember.autoschedule.measure",
    "RandomModel": "ember.autoschedule.cost_model",
    "RecordResult": "ember.autoschedule.records",
    "RecordTask": "ember.autoschedule.records",
    "RecordToFile": "ember.autoschedule.records",
    "RecordsError": "ember.autoschedule.records",
    "SchedulerResult": "ember.autoschedule.task_scheduler",
    "SearchParams": "ember.autoschedule.search",
    "SearchTask": "ember.autoschedule.task",
    "Sketch": "ember.autoschedule.sketch",
    "TaskScheduler": "ember.autoschedule.task_scheduler",
    "TaskTuner": "ember.autoschedule.tuning",
    "Timing": "ember.autoschedule.measure",
    "TuneResult": "ember.autoschedule.tuning",
    "TuningError": "ember.autoschedule.tuning",
    "TuningOptions": "ember.autoschedule.tuning",
    "apply_best": "ember.autoschedule.tuning",
    "calibrate": "ember.autoschedule.calibration",
    "distill": "ember.autoschedule.records",
    "extract_tasks": "ember.autoschedule.task",
    "generate_sketches": "ember.autoschedule.sketch",
    "load_best": "ember.autoschedule.records",
    "load_records": "ember.autoschedule.records",
    "tune_task": "ember.autoschedule.tuning",
}

__all__ = [
    "ApplyHistoryBest",
    "BuildResult",
    "Calibration",
    "CostModel",
    "ErrorKind",
    "EvolutionarySearch",
    "HardwareParams",
    "LocalBuilder",
    "LocalRunner",
    "MeasureInput",
    "MeasureRecord",
    "MeasureResult",
    "RPCRunner",
    "RandomModel",
    "RecordResult",
    "RecordTask",
    "RecordToFile",
    "RecordsError",
    "SchedulerResult",
    "SearchParams",
    "SearchTask",
    "Sketch",
    "TaskScheduler",
    "TaskTuner",
    "Timing",
    "TuneResult",
    "TuningError",
    "TuningOptions",
    "apply_best",
    "calibrate",
    "distill",
    "extract_tasks",
    "generate_sketches",
    "load_best",
    "load_records",
    "tune_task",
]


__getattr__ = lazy_exports(__name__, _NAMES)

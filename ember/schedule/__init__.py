"""Schedules as data: `State` (a ComputeDAG plus transform steps) and its lowering."""

from ember.schedule.lower import infer_bound, lower
from ember.schedule.state import (
    Annotation,
    Iterator,
    IteratorKind,
    Location,
    ScheduleError,
    Stage,
    State,
)
from ember.schedule.steps import (
    AnnotationStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    ComputeRootStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    SplitStep,
    Step,
    replay,
    step_from_json,
)

__all__ = [
    "Annotation",
    "AnnotationStep",
    "CacheReadStep",
    "CacheWriteStep",
    "ComputeAtStep",
    "ComputeInlineStep",
    "ComputeRootStep",
    "FuseStep",
    "Iterator",
    "IteratorKind",
    "Location",
    "PragmaStep",
    "ReorderStep",
    "RfactorStep",
    "ScheduleError",
    "SplitStep",
    "Stage",
    "State",
    "Step",
    "infer_bound",
    "lower",
    "replay",
    "step_from_json",
]

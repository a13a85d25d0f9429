"""Schedules as data: `State` (a ComputeDAG plus transform steps) and its lowering."""

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
    "ScheduleError",
    "SplitStep",
    "Stage",
    "State",
    "Step",
    "replay",
    "step_from_json",
]

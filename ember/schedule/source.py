"""Where a build finds tuned schedules: the small interface between `ember.build` and
the auto-scheduler's records, so the records format stays inside `ember.autoschedule`.

    class MySchedules:
        def lookup(self, workload_key, dag, target) -> State | None: ...
    ember.build(graph, target, params=params, tuning_records=MySchedules())

`ember.autoschedule.ApplyHistoryBest(log)` is the one over a records file.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ember.schedule.state import State
from ember.target import Target
from ember.te.dag import ComputeDAG


@runtime_checkable
class ScheduleSource(Protocol):
    """Tuned States by workload: `lookup` returns the State to compile `dag` (whose
    workload key is `workload_key`) with for `target`, or None for the default
    schedule; it raises ScheduleError when what it has does not apply to `dag` (the
    build warns, naming the kernel, and uses the default schedule)."""

    def lookup(self, workload_key: str, dag: ComputeDAG, target: Target) -> State | None: ...

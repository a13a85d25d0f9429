"""The auto-scheduler: search over States for each task of a network, measured on the
device and logged as tuning records."""

from ember.autoschedule.hardware import HardwareParams
from ember.autoschedule.records import (
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
from ember.autoschedule.task import SearchTask, extract_tasks

__all__ = [
    "ErrorKind",
    "HardwareParams",
    "MeasureRecord",
    "RecordResult",
    "RecordTask",
    "RecordToFile",
    "RecordsError",
    "SearchTask",
    "distill",
    "extract_tasks",
    "load_best",
    "load_records",
]

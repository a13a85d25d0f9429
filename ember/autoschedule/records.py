"""Tuning records: one measurement per JSON line, appended as the tuner measures.

A line holds the task (workload key, target, hardware parameters, optional FLOPs), the
transform steps of the measured State, and the result (costs in seconds, error kind,
message, timestamp, `in_network` for a time taken inside the network rather than
alone, and `compiler`, the family and major version of the compiler that built the
candidate), with a format version. `RecordToFile` appends, flushes and fsyncs
on every call, so a killed tuning run loses at most the round in flight; `load_records`
skips damaged lines (a truncated last line, garbage) with one warning and a count.
"""

from __future__ import annotations

import enum
import json
import math
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.errors import EmberError
from ember.schedule.state import ScheduleError, State
from ember.schedule.steps import Step, replay, step_from_json
from ember.target import Target
from ember.te.dag import ComputeDAG

RECORD_VERSION = 1

HardwareValue = int | float | str


class RecordsError(EmberError):
    """A records file cannot be used: missing, not a records file, or not writable."""


class ErrorKind(enum.Enum):
    """Why a measurement has no valid cost; NONE for a good one."""

    NONE = "none"
    INSTANTIATION = "instantiation"
    COMPILE = "compile"
    RUNTIME = "runtime"
    TIMEOUT = "timeout"
    WRONG_ANSWER = "wrong_answer"


@dataclass(frozen=True, slots=True)
class RecordTask:
    """What was tuned: the key that matches a record to a task on another run."""

    workload_key: str
    target: str
    hardware: tuple[tuple[str, HardwareValue], ...] = ()
    flops: int | None = None
    # How often the task runs in the network it was tuned for (the task scheduler's
    # weight; None when tuned alone): what `ember records report` weighs latency by.
    weight: int | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "workload_key": self.workload_key,
            "target": self.target,
            "hardware": dict(self.hardware),
        }
        if self.flops is not None:
            data["flops"] = self.flops
        if self.weight is not None:
            data["weight"] = self.weight
        return data

    @staticmethod
    def from_json(data: Any) -> RecordTask:
        data = _mapping(data, "task")
        workload_key = data.get("workload_key")
        if isinstance(workload_key, list):
            # Keys are JSON text; accept a record that stored the list itself.
            workload_key = json.dumps(workload_key)
        target = data.get("target")
        hardware = data.get("hardware", {})
        if not isinstance(workload_key, str) or not isinstance(target, str):
            raise RecordsError("task needs a string workload_key and target")
        if not isinstance(hardware, dict) or not all(
            isinstance(v, int | float | str) for v in hardware.values()
        ):
            raise RecordsError("task hardware must map names to numbers or strings")
        flops, weight = data.get("flops"), data.get("weight")
        for name, value in (("flops", flops), ("weight", weight)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise RecordsError(f"task {name} must be an integer, not {value!r}")
        hardware_items = tuple(sorted(hardware.items()))
        return RecordTask(workload_key, target, hardware_items, flops, weight)


def median_seconds(costs: Sequence[float]) -> float:
    """The median of a candidate's timed runs: what it costs. Not the mean: on a busy
    machine one call in ten can lose a scheduler tick (4 ms) while an OpenMP thread
    waits for a core, and the mean of ten 0.04 ms runs with one such outlier is ten
    times the kernel's time (seen on MobileNetV2 while another process ran)."""
    return float(statistics.median(costs))


@dataclass(frozen=True, slots=True)
class RecordResult:
    """What the measurement gave: costs in seconds (one per repeat) or an error."""

    costs: tuple[float, ...]
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    timestamp: float = field(default_factory=time.time)
    # A time per call of the schedule inside the network (`ember tune`'s check of the
    # tuned schedules against the defaults there), not a tuning trial timed alone:
    # `distill` prefers such records, and nothing that learns from trials reads them.
    in_network: bool = False
    # The compiler that built the candidate (`Compiler.identity`, "gcc 12"); "" in
    # records written before Ember noted it.
    compiler: str = ""

    @property
    def median_cost(self) -> float:
        """Median cost in seconds (`median_seconds`); infinity for an error or a result
        without costs."""
        if self.error is not ErrorKind.NONE or not self.costs:
            return math.inf
        return median_seconds(self.costs)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "costs": list(self.costs),
            "error": self.error.value,
            "message": self.message,
            "timestamp": self.timestamp,
        }
        if self.in_network:  # absent otherwise: older readers see what they know
            data["in_network"] = True
        if self.compiler:
            data["compiler"] = self.compiler
        return data

    @staticmethod
    def from_json(data: Any) -> RecordResult:
        data = _mapping(data, "result")
        costs = data.get("costs")
        if not isinstance(costs, list) or not all(
            isinstance(c, int | float) and not isinstance(c, bool) for c in costs
        ):
            raise RecordsError("result costs must be a list of numbers")
        try:
            error = ErrorKind(data.get("error"))
        except ValueError:
            raise RecordsError(f"unknown error kind {data.get('error')!r}") from None
        message = data.get("message", "")
        timestamp = data.get("timestamp")
        if not isinstance(message, str) or not isinstance(timestamp, int | float):
            raise RecordsError("result needs a string message and a numeric timestamp")
        in_network = data.get("in_network", False)
        if not isinstance(in_network, bool):
            raise RecordsError("result in_network must be true or false")
        compiler = data.get("compiler", "")
        if not isinstance(compiler, str):
            raise RecordsError("result compiler must be a string")
        costs_seconds = tuple(float(c) for c in costs)
        return RecordResult(costs_seconds, error, message, float(timestamp), in_network, compiler)


@dataclass(frozen=True, slots=True)
class MeasureRecord:
    """One line of a records file: a task, the steps of a State, and its result."""

    task: RecordTask
    steps: tuple[Step, ...]
    result: RecordResult
    version: int = RECORD_VERSION

    @property
    def is_valid(self) -> bool:
        return self.result.error is ErrorKind.NONE and bool(self.result.costs)

    @property
    def is_trial(self) -> bool:
        """A tuning trial (timed alone), not an in-network time (`RecordResult`)."""
        return not self.result.in_network

    @property
    def median_cost(self) -> float:
        return self.result.median_cost

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "task": self.task.to_json(),
            "steps": [step.to_json() for step in self.steps],
            "result": self.result.to_json(),
        }

    def to_line(self) -> str:
        """The record as one line of a records file (with its newline)."""
        return json.dumps(self.to_json(), separators=(",", ":")) + "\n"

    @staticmethod
    def from_json(data: Any) -> MeasureRecord:
        """Inverse of `to_json`; anything malformed raises RecordsError saying what."""
        data = _mapping(data, "record")
        version = data.get("version")
        if version != RECORD_VERSION:
            raise RecordsError(
                f"record format version {version!r}; this Ember reads version {RECORD_VERSION}"
            )
        steps = data.get("steps")
        if not isinstance(steps, list):
            raise RecordsError("record steps must be a list")
        try:
            parsed = tuple(step_from_json(step) for step in steps)
        except ScheduleError as error:
            raise RecordsError(str(error)) from None
        return MeasureRecord(
            RecordTask.from_json(data.get("task")),
            parsed,
            RecordResult.from_json(data.get("result")),
        )


def steps_key(steps: Sequence[Step]) -> str:
    """The identity of a schedule across runs: its steps as a record stores them."""
    return json.dumps([step.to_json() for step in steps], separators=(",", ":"))


def state_key(state: State) -> str:
    """`steps_key` of a state's steps: equal keys replay to equal states. Kept on the
    state (its steps never change): the search asks for the keys of the same states
    many times a round (a tenth of its time, recomputed each time)."""
    key = state.__dict__.get(_STATE_KEY)
    if key is None:
        key = steps_key(state.steps)  # type: ignore[arg-type]
        state.__dict__[_STATE_KEY] = key  # past the frozen dataclass's __setattr__
    return key


_STATE_KEY = "_ember_state_key"


def _mapping(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise RecordsError(f"{what} must be a JSON object")
    return data


class RecordToFile:
    """Measure callback: appends each round's records to `path` and makes them durable
    (flush + fsync) before returning, so killing the tuner loses at most the round in
    flight."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __call__(self, records: Sequence[MeasureRecord]) -> None:
        self.write(records)

    def write(self, records: Sequence[MeasureRecord]) -> None:
        text = "".join(record.to_line() for record in records)
        try:
            with open(self.path, "a+b") as file:
                # A run killed mid-line leaves no newline; start on a fresh line so this
                # round is not glued to the damaged one.
                if file.seek(0, os.SEEK_END) > 0:
                    file.seek(-1, os.SEEK_END)
                    if file.read(1) != b"\n":
                        text = "\n" + text
                file.write(text.encode())
                file.flush()
                os.fsync(file.fileno())
        except OSError as error:
            raise RecordsError(
                f"cannot append tuning records to {self.path}: {error.strerror}; "
                "choose a writable path for the log"
            ) from None


def load_records(path: str | os.PathLike[str]) -> list[MeasureRecord]:
    """All readable records of a records file, in file order. Damaged lines (a
    truncated last line from a killed run, garbage) are skipped with one warning that
    names the file and the count. A file with lines but no record raises RecordsError."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordsError(
            f"records file {path} does not exist; pass the log a tuning run wrote "
            "(RecordToFile / ember tune -o)"
        ) from None
    except OSError as error:
        raise RecordsError(f"cannot read records file {path}: {error.strerror}") from None
    records: list[MeasureRecord] = []
    damaged: list[int] = []
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            records.append(MeasureRecord.from_json(json.loads(raw)))
        except (ValueError, RecordsError):  # UnicodeDecodeError and JSONDecodeError too
            damaged.append(number)
    if damaged and not records:
        raise RecordsError(
            f"{path} holds no tuning record ({len(damaged)} unreadable line(s)); "
            "is it a records file? Records are JSON lines written by RecordToFile"
        )
    if damaged:
        warnings.warn(
            f"{path}: skipped {len(damaged)} damaged line(s) (first at line {damaged[0]}); "
            "a tuning run killed mid-write leaves one, the other records are used",
            stacklevel=2,
        )
    return records


def _records(source: str | os.PathLike[str] | Iterable[MeasureRecord]) -> list[MeasureRecord]:
    if isinstance(source, str | os.PathLike):
        return load_records(source)
    return list(source)


def load_best(
    source: str | os.PathLike[str] | Iterable[MeasureRecord],
    workload_key: str,
    target: object,
    compiler: str = "",
) -> MeasureRecord | None:
    """The valid record with the lowest mean cost for this workload and target (a
    Target or its string), or None when there is none; with a `compiler`
    (`Compiler.identity`), of the records measured with its family where there are
    any (`ApplyHistoryBest.best`). Errors never count."""
    return ApplyHistoryBest(source).best(workload_key, target, compiler)


def compiler_family(note: str) -> str:
    """The compiler family of a record's `compiler` note ("gcc 12" -> "gcc"); records
    without a note come from before Ember noted it, when gcc built them."""
    return note.split()[0] if note.strip() else "gcc"


class ApplyHistoryBest:
    """Tuned schedules from records (a file or MeasureRecords), for `ember.build`: the
    best valid record's steps for a workload and target (`ScheduleSource`). Where the
    records of a task were measured with compilers of more than one family (a log
    tuned with gcc, then with clang), `lookup` takes the best of those measured with
    the family that builds now: a schedule is fastest for the compiler that measured
    it, and a time measured with another does not say how this one does."""

    def __init__(self, source: str | os.PathLike[str] | Iterable[MeasureRecord]) -> None:
        records = _records(source)
        self._best = {(r.task.workload_key, r.task.target): r for r in distill(records)}
        self._best_by_family = {
            (r.task.workload_key, r.task.target, compiler_family(r.result.compiler)): r
            for r in distill_per_compiler(records)
        }
        self._warned: set[tuple[str, str, str]] = set()  # (target, tuned, building) told

    def best(self, workload_key: str, target: object, compiler: str = "") -> MeasureRecord | None:
        """The best valid record for the workload and target (or its string); with a
        `compiler` (`Compiler.identity`), the best of the records measured with its
        family where there are any."""
        key = (workload_key, str(target))
        if compiler:
            own = self._best_by_family.get((*key, compiler_family(compiler)))
            if own is not None:
                return own
        return self._best.get(key)

    def lookup(self, workload_key: str, dag: ComputeDAG, target: Target) -> State | None:
        """The best record's State for `dag` (of those measured with the building
        compiler's family where there are any), None without a record; a
        ScheduleError when the record's steps do not apply to `dag` (the caller, which
        knows the kernel, warns and uses the default schedule)."""
        from ember.toolchain import compiler_identity

        building_with = compiler_identity(target)
        best = self.best(workload_key, target, building_with)
        if best is None:
            return None
        state = replay(dag, best.steps)
        self._warn_of_another_compiler(best.result.compiler, building_with, target)
        return state

    def _warn_of_another_compiler(
        self, tuned_with: str, building_with: str, target: Target
    ) -> None:
        """Warn, once per target and pair, when a record was measured by a compiler of
        another family than `building_with`, the one that builds for `target` now: the
        schedules are the fastest for that one (ResNet-18's tuned with GCC or clang ran
        9-10% slower built by the other, BENCHMARKS.md; versions of one family were
        not compared). Records without a note come from before Ember noted it, most
        likely from gcc (the default until clang 19 became it on x86-64): they warn a
        clang build."""
        unnoted = not tuned_with
        family = compiler_family(tuned_with)
        key = (str(target), tuned_with, building_with)
        if not building_with or compiler_family(building_with) == family or key in self._warned:
            return
        self._warned.add(key)
        measured = (
            "carry no compiler note (written before Ember noted it, most likely by gcc)"
            if unnoted
            else f"were measured with {tuned_with}"
        )
        if target.is_host:
            how = f"build with CC={'-'.join(tuned_with.split()) if tuned_with else 'gcc'}"
        elif target.is_android:
            how = f"point EMBER_NDK_CC at a {family} for it"
        else:
            how = f"put a {family} cross compiler first on PATH"
        warnings.warn(
            f"tuning records for target {target} {measured}, and this build compiles with "
            f"{building_with}: the schedules are the fastest for the compiler that measured "
            f"them and may run slower built by another; {how} to build them as tuned, or "
            "tune again",
            stacklevel=2,
        )


def distill(records: Iterable[MeasureRecord]) -> list[MeasureRecord]:
    """The best valid record per (workload key, target), in first-seen order. Times
    taken inside the network outrank the trials timed alone: where the records end
    with in-network records of a task (no trial after them: a later run's new best
    was not compared in the network), the best is the fastest of those."""
    order: dict[tuple[str, str], None] = {}  # first-seen order of the tasks
    best: dict[tuple[str, str], MeasureRecord] = {}
    in_network: dict[tuple[str, str], MeasureRecord] = {}
    for record in records:
        key = (record.task.workload_key, record.task.target)
        if record.is_trial:
            in_network.pop(key, None)
            chosen = best
        else:
            chosen = in_network
        if record.is_valid:
            order.setdefault(key)
            if key not in chosen or record.median_cost < chosen[key].median_cost:
                chosen[key] = record
    chosen_records = (in_network.get(key) or best.get(key) for key in order)
    return [record for record in chosen_records if record is not None]


def distill_per_compiler(records: Iterable[MeasureRecord]) -> list[MeasureRecord]:
    """`distill` for the records of each compiler family (`compiler_family`) apart:
    the best record per (workload key, target) of each family that measured it,
    grouped by family (families in first-seen order, each in its tasks' first-seen
    order). A log tuned with gcc and then with clang keeps both bests, for builds with
    either."""
    by_family: dict[str, list[MeasureRecord]] = {}
    for record in records:
        by_family.setdefault(compiler_family(record.result.compiler), []).append(record)
    return [best for measured in by_family.values() for best in distill(measured)]


def fastest_trials(
    source: str | os.PathLike[str] | Iterable[MeasureRecord],
    workload_keys: Sequence[str],
    count: int,
    compiler: str = "",
) -> list[list[MeasureRecord]]:
    """Per workload key, the valid trial records (timed alone) of up to `count`
    distinct schedules, fastest first: each schedule by its fastest record. With a
    `compiler` (`Compiler.identity`), only records measured with its family."""
    position = {key: index for index, key in enumerate(workload_keys)}
    fastest: list[dict[str, MeasureRecord]] = [{} for _ in workload_keys]
    family = compiler_family(compiler) if compiler else None
    for record in _records(source):
        index = position.get(record.task.workload_key)
        if index is None or not record.is_trial or not record.is_valid:
            continue
        if family is not None and compiler_family(record.result.compiler) != family:
            continue
        kept, key = fastest[index], steps_key(record.steps)
        if key not in kept or record.median_cost < kept[key].median_cost:
            kept[key] = record
    return [sorted(kept.values(), key=lambda r: r.median_cost)[:count] for kept in fastest]


def default_distill_output(path: str | os.PathLike[str]) -> Path:
    """`log.json` -> `log.best.json`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.best{path.suffix or '.json'}")


def distill_file(
    input_path: str | os.PathLike[str], output_path: str | os.PathLike[str] | None = None
) -> tuple[Path, list[MeasureRecord]]:
    """Distill `input_path` into `output_path` (default `<input>.best.json`), merged with
    the records already there, the best per task of each compiler family
    (`distill_per_compiler`); the output is replaced atomically. Returns the output
    path and what it now holds."""
    output = Path(output_path) if output_path is not None else default_distill_output(input_path)
    records = load_records(input_path)
    if output.exists():
        records = load_records(output) + records
    best = distill_per_compiler(records)
    try:
        with tempfile.NamedTemporaryFile(
            "w", dir=output.parent, prefix=f".{output.name}.", delete=False
        ) as file:
            file.write("".join(record.to_line() for record in best))
            file.flush()
            os.fsync(file.fileno())
        os.replace(file.name, output)
    except OSError as error:
        raise RecordsError(
            f"cannot write distilled records to {output}: {error.strerror}; "
            "choose a writable path with -o"
        ) from None
    return output, best


@dataclass(frozen=True, slots=True)
class TaskRecordSummary:
    """What `ember records show` prints for one (workload key, target)."""

    workload_key: str
    target: str
    trials: int
    best_seconds: float | None
    gflops: float | None
    errors: tuple[tuple[ErrorKind, int], ...]


def summarize(records: Iterable[MeasureRecord]) -> list[TaskRecordSummary]:
    """Per task, in first-seen order: trials, best latency and GFLOPS, errors by kind."""
    groups: dict[tuple[str, str], list[MeasureRecord]] = {}
    for record in (record for record in records if record.is_trial):
        groups.setdefault((record.task.workload_key, record.task.target), []).append(record)
    summaries = []
    for (workload_key, target), group in groups.items():
        best = min(group, key=lambda r: r.median_cost)
        seconds = best.median_cost if best.is_valid else None
        flops = next((r.task.flops for r in group if r.task.flops is not None), None)
        counts: dict[ErrorKind, int] = {}
        for record in group:
            if record.result.error is not ErrorKind.NONE:
                counts[record.result.error] = counts.get(record.result.error, 0) + 1
        errors = tuple((kind, counts[kind]) for kind in ErrorKind if kind in counts)
        gflops = flops / seconds / 1e9 if seconds and flops is not None else None
        summaries.append(
            TaskRecordSummary(workload_key, target, len(group), seconds, gflops, errors)
        )
    return summaries


__all__ = [
    "RECORD_VERSION",
    "ApplyHistoryBest",
    "ErrorKind",
    "MeasureRecord",
    "RecordResult",
    "RecordTask",
    "RecordToFile",
    "RecordsError",
    "TaskRecordSummary",
    "default_distill_output",
    "distill",
    "distill_file",
    "load_best",
    "load_records",
    "summarize",
]

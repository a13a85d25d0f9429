"""ember.build with tuning records: a kernel with a valid record for its workload and
target is compiled with that schedule, every other kernel with its default schedule;
the library still computes what the reference interpreter computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from library_abi import run_library

import ember
from ember.autoschedule import ErrorKind, MeasureRecord, RecordResult, RecordToFile, extract_tasks
from ember.autoschedule.measure import record_task
from ember.autoschedule.records import RecordsError
from ember.autoschedule.task import SearchTask
from ember.errors import BuildError
from ember.graph import GraphBuilder
from ember.graph.interpret import interpret
from ember.graph.ir import Graph, Params
from ember.graph.ops.attrs import ConvAttrs, ReshapeAttrs
from ember.schedule import SplitStep, State, Step
from ember.target import Target
from ember.te import ComputeDAG
from ember.toolchain import compiler_identity

RTOL, ATOL = 1e-4, 1e-5


def conv_graph() -> tuple[Graph, Params]:
    """conv + bias + relu, then a dense: two tasks."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("two_tasks")
    x = b.input("x", (1, 4, 6, 6))
    w = b.param("w", rng.standard_normal((8, 4, 3, 3)).astype("float32"))
    bias = rng.standard_normal(8).astype("float32")
    conv = b.add("conv", [x, w], ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NCHW", "OIHW"))
    hidden = b.add("relu", [b.add("add", [conv, b.param("bias_4d", bias.reshape(8, 1, 1))])])
    flat = b.add("reshape", [hidden], ReshapeAttrs((1, 288)))
    dense_w = b.param("dense_w", rng.standard_normal((5, 288)).astype("float32"))
    return b.build([b.add("dense", [flat, dense_w])])


def record(task: SearchTask, steps: tuple[Step, ...], cost: float = 1e-3) -> MeasureRecord:
    """A record as this machine's tuner would write it (its compiler noted)."""
    compiler = compiler_identity(task.target)
    return MeasureRecord(record_task(task), steps, RecordResult((cost,), compiler=compiler))


def run_and_compare(graph: Graph, params: Params, library: ember.Library) -> None:
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.standard_normal(v.shape).astype(v.dtype) for v in graph.inputs}
    expected = interpret(graph, params, feeds)
    for value, actual in zip(graph.outputs, run_library(library, feeds), strict=True):
        np.testing.assert_allclose(actual, expected[value.name], rtol=RTOL, atol=ATOL)


def schedules(library: ember.Library) -> dict[str, str]:
    return {g["workload_key"]: g["schedule"] for g in library.metadata["groups"]}  # type: ignore[attr-defined, index]


@pytest.fixture(scope="module")
def network() -> tuple[Graph, Params, list[SearchTask]]:
    graph, params = conv_graph()
    tasks, _ = extract_tasks(graph, params, "llvm")
    assert len(tasks) == 2
    return graph, params, tasks


def test_a_recorded_schedule_is_used_for_its_kernel_only(
    network: tuple[Graph, Params, list[SearchTask]], tmp_path: Path
) -> None:
    graph, params, tasks = network
    log = tmp_path / "log.json"
    # The unscheduled state (no steps: every stage at root, plain loops) is a legal
    # schedule unlike the default one; a slower valid record and an error lose to it.
    RecordToFile(log)(
        [
            record(tasks[0], (SplitStep(2, 0, (1,)),), cost=5e-3),
            record(tasks[0], ()),
            MeasureRecord(record_task(tasks[0]), (), RecordResult((), ErrorKind.RUNTIME)),
        ]
    )
    library = ember.build(graph, "llvm", params=params, tuning_records=log)
    kinds = schedules(library)
    assert kinds[tasks[0].workload_key] == "tuned"
    assert kinds[tasks[1].workload_key] == "default"
    untuned = ember.build(graph, "llvm", params=params)
    assert set(schedules(untuned).values()) <= {"default", "helper"}
    tuned = next(k for k in library.sources.kernels if k.tuned)
    default = next(k for k in untuned.sources.kernels if k.name == tuned.name)
    assert tuned.c_source != default.c_source
    run_and_compare(graph, params, library)


def test_records_in_memory_and_of_other_targets(
    network: tuple[Graph, Params, list[SearchTask]],
) -> None:
    graph, params, tasks = network
    other = SearchTask.create(tasks[0].compute_dag, "llvm -mtriple=aarch64-linux-gnu")
    library = ember.build(graph, "llvm", params=params, tuning_records=[record(other, ())])
    assert "tuned" not in schedules(library).values()
    library = ember.build(graph, "llvm", params=params, tuning_records=[record(tasks[1], ())])
    assert schedules(library)[tasks[1].workload_key] == "tuned"
    run_and_compare(graph, params, library)
    # An iterator of records is read once, not emptied by the checks before use.
    records = iter([record(tasks[1], ())])
    library = ember.build(graph, "llvm", params=params, tuning_records=records)
    assert schedules(library)[tasks[1].workload_key] == "tuned"


def test_any_schedule_source_gives_build_its_states(
    network: tuple[Graph, Params, list[SearchTask]],
) -> None:
    """`ember.build` takes tuned States through `lookup` alone (ScheduleSource), from
    whatever keeps them; the records format is the auto-scheduler's business."""
    graph, params, tasks = network
    asked: list[str] = []

    class Initial:
        def lookup(self, workload_key: str, dag: ComputeDAG, target: Target) -> State | None:
            asked.append(workload_key)
            return State.initial(dag) if workload_key == tasks[0].workload_key else None

    library = ember.build(graph, "llvm", params=params, tuning_records=Initial())
    assert tasks[0].workload_key in asked and schedules(library)[tasks[0].workload_key] == "tuned"
    run_and_compare(graph, params, library)
    with pytest.raises(BuildError, match="ScheduleSource"):
        ember.build(graph, "llvm", params=params, tuning_records=42)  # type: ignore[arg-type]


def test_a_record_that_does_not_apply_falls_back_with_a_warning(
    network: tuple[Graph, Params, list[SearchTask]],
) -> None:
    graph, params, tasks = network
    broken = record(tasks[0], (SplitStep(99, 0, (2,)),))
    with pytest.warns(UserWarning, match="does not apply to its DAG"):
        library = ember.build(graph, "llvm", params=params, tuning_records=[broken])
    assert schedules(library)[tasks[0].workload_key] == "default"
    run_and_compare(graph, params, library)


def test_bad_tuning_records_are_refused(
    network: tuple[Graph, Params, list[SearchTask]], tmp_path: Path
) -> None:
    graph, params, _ = network
    with pytest.raises(RecordsError, match="does not exist"):
        ember.build(graph, "llvm", params=params, tuning_records=tmp_path / "missing.json")
    with pytest.raises(BuildError, match="a records file, MeasureRecords or a ScheduleSource"):
        ember.build(graph, "llvm", params=params, tuning_records=["not a record"])


def test_ember_compile_lists_tuned_and_default_kernels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ember.cli import main
    from ember.testing import get_workload

    graph, params = get_workload("mlp")
    tasks, _ = extract_tasks(graph, params, "llvm")
    log = tmp_path / "log.json"
    RecordToFile(log)([record(tasks[0], ())])
    artifact = tmp_path / "mlp.tar"
    assert main(["compile", "mlp", "-o", str(artifact), "--tuning-records", str(log)]) == 0
    out = capsys.readouterr().out
    assert "tuned schedules: 1 of " in out
    assert "default schedule (no valid record) for: " in out

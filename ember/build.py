"""ember.build: a graph and its params to one shared library that runs the whole graph.

    lib = ember.build(graph, "llvm", params=params)
    lib.so_path, lib.metadata, lib.params, lib.sources (the generated C, loop IR)
    lib.export_library("net.tar")

The pipeline, one named step after another (EMBER_DEBUG=1 prints each result):

1. partition (`ember.partition`, shared with the auto-scheduler's task extraction):
   the graph passes, fusion into groups, and one kernel per distinct workload key.
2. plan: where each tensor lives (`ember.runtime.memory_plan` packs intermediates into
   one arena by liveness) and the steps of the AOT entry point (`ember.runtime.aot`).
3. compile: each kernel with its schedule (the State `tuning_records` has for its
   workload key and target, else the default schedule) through the target's backend
   (`ember.backend.compile_kernel`) into an object file, in parallel and cached by
   content; the hand-written runtime and the generated entry point likewise; all
   linked into one library. Every object is compiled with -fvisibility=hidden, so the
   library exports exactly the C ABI of runtime.c.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ember.backend import Backend, Output, backend_for, compile_kernel
from ember.config import debug_dump
from ember.device import host_cpu_count
from ember.errors import BuildError
from ember.graph.analysis import summarize
from ember.graph.ir import Graph, Value
from ember.graph.ops.attrs import AxisAttrs
from ember.graph.passes import FusedGraph, FusedGroup
from ember.graph.passes.pack_weights import packed_layouts
from ember.loop.ir import PrimFunc
from ember.loop.printer import format_func
from ember.partition import KernelSpec, Partition, partition, runs_in_helper
from ember.runtime.abi import TensorSpec
from ember.runtime.aot import (
    TOPK_DTYPES,
    AotProgram,
    BufferRef,
    CopyStep,
    IndexCheck,
    KernelStep,
    Region,
    Step,
    TopKStep,
    render_entry_point,
    runtime_sources,
    topk_step,
)
from ember.runtime.artifact import FORMAT_VERSION, export_library
from ember.runtime.memory_plan import MemoryPlan, TensorLifetime, plan_memory
from ember.runtime.module import Module
from ember.schedule.default import default_schedule
from ember.schedule.source import ScheduleSource
from ember.schedule.state import ScheduleError, State
from ember.target import Target
from ember.topi import NOT_EXPRESSIBLE

_OBJECT_FLAGS = ("-fvisibility=hidden",)

TuningRecords = str | os.PathLike[str] | Sequence[object] | ScheduleSource


@dataclass(frozen=True, slots=True, eq=False)
class KernelSource:
    """What one kernel of a library was generated as: its C and its loop IR."""

    name: str
    c_source: str
    func: PrimFunc
    tuned: bool = False  # scheduled from a tuning record (else the default schedule)

    @property
    def loop_ir(self) -> str:
        """The loop IR as text (printed on demand: most builds never ask)."""
        return format_func(self.func) + "\n"


@dataclass(frozen=True, slots=True, eq=False)
class GeneratedSources:
    """The generated code of a library, exactly as it was compiled: the AOT entry
    point's C and each distinct kernel's. (The hand-written runtime is not in it: it
    is the same in every library, ember/runtime/c.)"""

    entry_point: str = ""
    kernels: tuple[KernelSource, ...] = ()

    def files(self) -> dict[str, str]:
        """File name -> text: `entry.c`, and `NAME.c` and `NAME.loop` per kernel."""
        files = {"entry.c": self.entry_point}
        for kernel in self.kernels:
            files[f"{kernel.name}.c"] = kernel.c_source
            files[f"{kernel.name}.loop"] = kernel.loop_ir
        return files


@dataclass(frozen=True, slots=True, eq=False)
class Library:
    """A built library: `so_path` (mod.so, in the build cache), `metadata` (mod.json),
    `params` (mod.params: the arrays after the graph passes, by the names in
    `metadata["params"]`, in that order) and `sources` (the generated C it was
    compiled from, for reading; not part of the artifact)."""

    so_path: Path
    metadata: dict[str, object]
    params: dict[str, np.ndarray]
    sources: GeneratedSources = field(default_factory=GeneratedSources)

    @property
    def target(self) -> Target:
        return Target(str(self.metadata["target"]))

    def export_library(self, path: str | os.PathLike[str]) -> Path:
        """Write the artifact (`.tar` with mod.so, mod.json, mod.params) to `path`."""
        return Path(export_library(self, Path(path)))

    def load(self) -> Module:
        """The library as a runtime module, in place (no export); runs on this machine."""
        return Module.from_library(self)


def build(
    graph: Graph,
    target: Target | str = "llvm",
    params: Mapping[str, np.ndarray] | None = None,
    tuning_records: TuningRecords | None = None,
    *,
    progress: bool | None = None,
) -> Library:
    """Build `graph` for `target` into one library (see the module docstring).

    `tuning_records` (a records file, MeasureRecords, or any `ScheduleSource`): each
    kernel whose workload key has a tuned State for `target` is compiled with it, the
    others with their default schedule (`Library.metadata["groups"][i]["schedule"]`
    says which). `progress` shows a progress bar over the kernels on stderr; by default
    only when stderr is a terminal."""
    target = target if isinstance(target, Target) else Target(target)
    if not target.is_cpu:
        raise BuildError(
            f"target {target} cannot be built yet: ember.build supports CPU targets "
            "('llvm' or 'c', with -mtriple/-mcpu/-mattr)"
        )
    backend = backend_for(target)  # an unknown -backend fails before any work
    _check_sizes(graph)
    schedules = schedule_source(tuning_records)
    parts = partition(graph, params, target)
    plan = plan_build(parts, target, backend)
    show = sys.stderr.isatty() if progress is None else progress
    so_path, sources = _compile_and_link(plan, target, backend, graph.name, show, schedules)
    metadata = _metadata(graph, parts.fused, plan, target, sources)
    params_out = {value.name: parts.params[value.name] for value in parts.graph.params}
    return Library(so_path, metadata, params_out, sources)


# 128 TiB: the user address space of x86-64 and AArch64 Linux; no tensor larger than
# this can ever be allocated, so a graph holding one is refused rather than compiled.
MAX_TENSOR_BYTES = 2**47


def _check_sizes(graph: Graph) -> None:
    values = [*graph.inputs, *graph.params, *(v for node in graph.nodes for v in node.outputs)]
    for value in values:
        if value.type.nbytes > MAX_TENSOR_BYTES:
            raise BuildError(
                f"value {value.name!r} is {value.type} ({value.type.nbytes} bytes), more than "
                f"any machine can allocate ({MAX_TENSOR_BYTES} bytes); check the model's "
                "shapes (an input's dimensions, a reshape's target)"
            )


def schedule_source(tuning_records: TuningRecords | None) -> ScheduleSource | None:
    """`tuning_records` as a ScheduleSource: a records file or a list of records is
    read by the auto-scheduler's `ApplyHistoryBest` (the only reader of the format)."""
    if tuning_records is None or isinstance(tuning_records, ScheduleSource):
        return tuning_records
    from ember.autoschedule.records import ApplyHistoryBest, MeasureRecord

    if isinstance(tuning_records, str | os.PathLike):
        return ApplyHistoryBest(tuning_records)
    accepted = "a records file, MeasureRecords or a ScheduleSource (with .lookup)"
    if not isinstance(tuning_records, Iterable):
        raise BuildError(f"tuning_records must be {accepted}, not {type(tuning_records).__name__}")
    records: list[MeasureRecord] = []
    for record in tuning_records:  # read once: an iterator is consumed here
        if not isinstance(record, MeasureRecord):
            raise BuildError(
                f"tuning_records must be {accepted}, not a list holding {type(record).__name__}"
            )
        records.append(record)
    return ApplyHistoryBest(records)


# -- plan ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """How one fused group runs, for the metadata."""

    name: str
    kind: str
    kernel: str
    workload_key: str | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flops: int  # of one run of the group, for the profile's GFLOP/s
    # Its kernel writes views of larger outputs (an in-place concatenation's inputs),
    # so a kernel of its task compiled alone cannot stand in for it.
    output_views: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class BuildPlan:
    """What to compile (`kernels`) and how the entry point runs (`program`)."""

    program: AotProgram
    memory: MemoryPlan
    kernels: tuple[KernelSpec, ...]
    groups: tuple[GroupRecord, ...]


def plan_build(parts: Partition, target: Target, backend: Backend) -> BuildPlan:
    """Place every tensor and list the steps of the entry point, one per group (each
    calls its kernel's packed entry, named by the target's backend)."""
    fused = parts.fused
    graph = fused.graph
    locations = _boundary_locations(graph)
    # An in-place concatenation's inputs live in its output (their kernels write views).
    concatenated = {
        name: group.outputs[0]
        for group in fused.groups
        for name in parts.in_place.get(group.name, {})
    }
    memory = plan_memory(_intermediate_lifetimes(fused, locations, concatenated, parts.in_place))
    for allocation in memory.allocations:
        locations[allocation.tensor.name] = BufferRef(Region.ARENA, allocation.offset)
    for name, concatenation in concatenated.items():
        locations[name] = locations[concatenation.name]
    steps: list[Step] = []
    records: list[GroupRecord] = []
    for group in fused.groups:
        if group.name in parts.in_place:
            continue  # its producers wrote it
        kernel = parts.kernel_of(group)
        if kernel is None:
            step = _helper_step(group, locations)
            steps.append(step)
            records.append(_record(group, f"ember_topk_{step.dtype}", None))
            continue
        refs = tuple(locations[value.name] for value in (*group.inputs, *group.outputs))
        checks = _index_checks(group, locations)
        steps.append(KernelStep(group.name, backend.symbols(kernel.name)[1], refs, checks))
        records.append(_record(group, kernel.name, kernel.workload_key, bool(kernel.views)))
    steps.extend(_output_copies(graph, locations))
    program = AotProgram(
        target=str(target),
        inputs=tuple(_spec(value) for value in graph.inputs),
        outputs=tuple(_spec(value) for value in graph.outputs),
        params=tuple(_spec(value) for value in graph.params),
        arena_bytes=memory.arena_bytes,
        steps=tuple(steps),
    )
    return BuildPlan(program, memory, parts.kernels, tuple(records))


def _boundary_locations(graph: Graph) -> dict[str, BufferRef]:
    """Inputs, params, and each output value at its first position in the outputs."""
    locations: dict[str, BufferRef] = {}
    for index, value in enumerate(graph.inputs):
        locations[value.name] = BufferRef(Region.INPUT, index)
    for index, value in enumerate(graph.params):
        locations[value.name] = BufferRef(Region.PARAM, index)
    for index, value in enumerate(graph.outputs):
        locations.setdefault(value.name, BufferRef(Region.OUTPUT, index))
    return locations


def _intermediate_lifetimes(
    fused: FusedGraph,
    boundary: Mapping[str, BufferRef],
    concatenated: Mapping[str, Value],
    in_place: Container[str],
) -> list[TensorLifetime]:
    """Each tensor groups pass between them (and the unused outputs a helper writes
    anyway), from the step that writes it to the last step that reads it. A value in
    `concatenated` is written into the concatenation it names (whose life starts at
    the first such write); the groups `in_place` run no step."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    sizes: dict[str, int] = {}
    steps = [group for group in fused.groups if group.name not in in_place]
    for step, group in enumerate(steps):
        for value in group.inputs:
            if value.name in first:
                last[value.name] = step
        written = group.nodes[0].outputs if runs_in_helper(group) else group.outputs
        for value in written:
            value = concatenated.get(value.name, value)
            if value.name not in boundary:
                first.setdefault(value.name, step)
                last[value.name] = step
                sizes[value.name] = value.type.nbytes
    return [TensorLifetime(name, sizes[name], first[name], last[name]) for name in first]


def _index_checks(group: FusedGroup, locations: Mapping[str, BufferRef]) -> tuple[IndexCheck, ...]:
    """Checks of the indices the group's gathers read from tensors computed at run time
    (`fuse` keeps them out of the group; constant indices were checked when folded)."""
    params = {value.name for value in group.params}
    checks = []
    for node in group.nodes:
        if node.op not in ("gather", "gather_elements"):
            continue
        data, indices = node.inputs
        if indices.name in params or indices.type.size == 0:
            continue
        attrs = node.attrs
        assert isinstance(attrs, AxisAttrs)
        what = f"{node.op} node {node.name!r}"
        location = locations[indices.name]
        checks.append(
            IndexCheck(what, indices.dtype, location, indices.type.size, data.shape[attrs.axis])
        )
    return tuple(checks)


def _helper_step(group: FusedGroup, locations: Mapping[str, BufferRef]) -> TopKStep:
    (node,) = group.nodes
    dtype = node.inputs[0].dtype
    if node.op != "topk" or dtype not in TOPK_DTYPES:
        what = f"{node.op} on {dtype}" if node.op == "topk" else node.op
        raise BuildError(
            f"node {node.name!r} ({what}) has no C implementation in Ember's runtime: "
            f"{NOT_EXPRESSIBLE[node.op]}. Remove it from the model (e.g. compute it after "
            f"running the library) or cast its input to one of {', '.join(TOPK_DTYPES)}"
        )
    data, (values, indices) = node.inputs[0], node.outputs
    return topk_step(node, locations[data.name], locations[values.name], locations[indices.name])


def _output_copies(graph: Graph, locations: Mapping[str, BufferRef]) -> list[Step]:
    """Outputs no group writes: graph inputs, params, or an output listed twice."""
    copies: list[Step] = []
    for index, value in enumerate(graph.outputs):
        destination = BufferRef(Region.OUTPUT, index)
        source = locations[value.name]
        if source != destination and value.type.nbytes > 0:
            copies.append(CopyStep(f"output {index}", source, destination, value.type.nbytes))
    return copies


def _spec(value: Value) -> TensorSpec:
    return TensorSpec(value.name, value.shape, value.dtype)


def _record(
    group: FusedGroup, kernel: str, workload_key: str | None, output_views: bool = False
) -> GroupRecord:
    return GroupRecord(
        name=group.name,
        kind=group.kind.value,
        kernel=kernel,
        workload_key=workload_key,
        inputs=tuple(value.name for value in group.inputs),
        outputs=tuple(value.name for value in group.outputs),
        flops=summarize(group.as_graph()).total_flops,
        output_views=output_views,
    )


# -- compile ---------------------------------------------------------------------------


def _compile_and_link(
    plan: BuildPlan,
    target: Target,
    backend: Backend,
    name: str,
    show: bool,
    schedules: ScheduleSource | None,
) -> tuple[Path, GeneratedSources]:
    """Every object compiled in parallel (cached), then linked into one library; also
    the generated sources, as compiled. Kernels are scheduled on this thread (a tuned
    State's lookup may warn, and warnings belong to the caller's thread), then
    generated and compiled in the pool."""
    entry_point = render_entry_point(plan.program)
    debug_dump("AOT entry point", entry_point)
    scheduled = [(kernel, *_schedule(kernel, target, schedules)) for kernel in plan.kernels]
    with (
        ThreadPoolExecutor(max_workers=host_cpu_count()) as pool,
        _progress_bar(show, f"building {name}", len(plan.kernels)) as advance,
    ):
        runtime = [
            pool.submit(backend.compile, source, target, Output.OBJECT, flags=_OBJECT_FLAGS)
            for source in (*runtime_sources(), entry_point)
        ]
        futures: list[Future[tuple[KernelSource, Path]]] = []
        for kernel, state, tuned in scheduled:
            future = pool.submit(_compile_kernel, kernel, state, tuned, target)
            future.add_done_callback(lambda _: advance())
            futures.append(future)
        objects = [future.result() for future in runtime]
        kernels = [future.result() for future in futures]
    objects += [path for _, path in kernels]
    sources = GeneratedSources(entry_point, tuple(source for source, _ in kernels))
    return backend.link(objects, target), sources


def _schedule(
    kernel: KernelSpec, target: Target, schedules: ScheduleSource | None
) -> tuple[State, bool]:
    """The tuned State for the kernel's workload, else its default schedule."""
    try:
        tuned = schedules.lookup(kernel.workload_key, kernel.dag, target) if schedules else None
    except ScheduleError as error:
        warnings.warn(
            f"the tuning record for kernel {kernel.name} does not apply to its DAG "
            f"({error}); it gets its default schedule",
            stacklevel=5,
        )
        tuned = None
    if tuned is not None:
        return tuned, True
    return default_schedule(kernel.dag, target), False


def _compile_kernel(
    kernel: KernelSpec, state: State, tuned: bool, target: Target
) -> tuple[KernelSource, Path]:
    compiled = compile_kernel(
        state,
        target,
        kernel.name,
        output=Output.OBJECT,
        flags=_OBJECT_FLAGS,
        views=dict(kernel.views),
    )
    generated = compiled.kernel
    return KernelSource(kernel.name, generated.source, generated.lowered, tuned), compiled.path


@contextmanager
def _progress_bar(show: bool, description: str, total: int) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr (yields the function that advances it), or
    nothing when not shown."""
    if not show:
        yield lambda: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("kernels"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


# -- metadata --------------------------------------------------------------------------


def _metadata(
    original: Graph,
    fused: FusedGraph,
    plan: BuildPlan,
    target: Target,
    sources: GeneratedSources | None = None,
) -> dict[str, object]:
    """mod.json: everything a runtime or a user needs to know about the library."""
    from ember import __version__

    summary = summarize(original).to_json()
    del summary["inputs"], summary["outputs"]
    layouts = packed_layouts(fused.graph)
    tuned = {kernel.name for kernel in sources.kernels if kernel.tuned} if sources else set()
    return {
        "format_version": FORMAT_VERSION,
        "ember_version": __version__,
        "target": str(target),
        "name": original.name,
        "inputs": [_tensor_json(value) for value in original.inputs],
        "outputs": [_tensor_json(value) for value in original.outputs],
        "params": [_param_json(value, layouts) for value in fused.graph.params],
        "memory_plan": plan.memory.to_json(),
        "groups": [
            {
                "name": record.name,
                "kind": record.kind,
                "kernel": record.kernel,
                "workload_key": record.workload_key,
                "schedule": _schedule_kind(record, tuned),
                "inputs": list(record.inputs),
                "outputs": list(record.outputs),
                "flops": record.flops,
                **({"output_views": True} if record.output_views else {}),
            }
            for record in plan.groups
        ],
        "graph": {
            **summary,
            "optimized_nodes": len(fused.graph.nodes),
            "fused_groups": len(fused.groups),
            "kernels": len(plan.kernels),
        },
    }


def _schedule_kind(record: GroupRecord, tuned: set[str]) -> str:
    if record.workload_key is None:
        return "helper"  # hand-written C (topk), nothing to schedule
    return "tuned" if record.kernel in tuned else "default"


def _param_json(value: Value, layouts: Mapping[str, str]) -> dict[str, object]:
    """A param's entry; one re-laid out at build time names its layout (pack_weights)."""
    entry = _tensor_json(value)
    if value.name in layouts:
        entry["layout"] = layouts[value.name]
    return entry


def _tensor_json(value: Value) -> dict[str, object]:
    return {"name": value.name, "shape": list(value.shape), "dtype": value.dtype}

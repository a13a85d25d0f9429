"""ember.build: a graph and its params to one shared library that runs the whole graph.

    lib = ember.build(graph, "llvm", params=params)
    lib.so_path, lib.metadata, lib.params, lib.sources (the generated C, loop IR)
    lib.export_library("net.tar")

The pipeline, one named step after another (EMBER_DEBUG=1 prints each result):

1. graph passes (`optimize`): fold_constants, fold_batch_norm, convert_layout to NHWC
   (CPU kernels vectorise over the innermost channel axis), then simplify, which must
   come after convert_layout to merge the transposes it leaves, then pack_weights
   (constant dense/matmul weights re-laid out in blocks of the target's vector lanes;
   `mod.json` names each packed param's layout). Param names are made
   safe for the safetensors reader in C. Inputs and outputs keep their names and
   layouts: the transposes to and from NHWC are inside the library.
2. fuse into groups; each group becomes one kernel, groups with the same workload key
   share one.
3. plan: where each tensor lives (`ember.runtime.memory_plan` packs intermediates into
   one arena by liveness) and the steps of the AOT entry point (`ember.runtime.aot`).
4. compile: each kernel lowered with its schedule (the best tuning record's for its
   workload key and target when `tuning_records` has one, else the default schedule)
   and compiled to an object file in parallel, cached
   by content (`ember.toolchain`); the hand-written runtime and the generated entry
   point likewise; all linked into one library. Every object is compiled with
   -fvisibility=hidden, so the library exports exactly the C ABI of runtime.c.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ember.autoschedule.records import MeasureRecord, load_best, load_records
from ember.codegen.c import entry_symbols
from ember.config import debug_enabled
from ember.errors import BuildError
from ember.graph.analysis import summarize
from ember.graph.ir import Graph, NameSupply, Node, Params, TensorType, Value
from ember.graph.passes import (
    FusedGraph,
    FusedGroup,
    GroupKind,
    convert_layout,
    fold_batch_norm,
    fold_constants,
    fuse,
    simplify,
)
from ember.graph.passes.pack_weights import pack_weights, packed_layouts
from ember.loop.ir import PrimFunc
from ember.loop.printer import format_func
from ember.runtime.aot import (
    TOPK_DTYPES,
    AotProgram,
    BufferRef,
    CopyStep,
    KernelStep,
    Region,
    Step,
    TensorSpec,
    TopKStep,
    render_entry_point,
    runtime_sources,
    topk_step,
)
from ember.runtime.artifact import FORMAT_VERSION, export_library
from ember.runtime.memory_plan import MemoryPlan, TensorLifetime, plan_memory
from ember.runtime.module import Module
from ember.schedule.default import default_schedule
from ember.schedule.lower import lower
from ember.schedule.state import ScheduleError, State
from ember.schedule.steps import replay
from ember.target import Target
from ember.te.dag import ComputeDAG
from ember.toolchain import compile_object, kernel_source, link_shared
from ember.topi import NOT_EXPRESSIBLE, group_to_dag

_OBJECT_FLAGS = ("-fvisibility=hidden",)
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.:/-]+")


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
    tuning_records: str | os.PathLike[str] | Sequence[object] | None = None,
    *,
    progress: bool | None = None,
) -> Library:
    """Build `graph` for `target` into one library (see the module docstring).

    `tuning_records` (a records file, or records): each kernel whose workload key has
    a valid record for `target` is compiled with the best one's schedule, the others
    with their default schedule (`Library.metadata["groups"][i]["schedule"]` says
    which). `progress` shows a progress bar over the kernels on stderr; by default only when
    stderr is a terminal."""
    target = target if isinstance(target, Target) else Target(target)
    if not target.is_cpu:
        raise BuildError(
            f"target {target} cannot be built yet: ember.build supports CPU targets "
            "('llvm' or 'c', with -mtriple/-mcpu/-mattr)"
        )
    records = _tuning_records(tuning_records)
    arrays = checked_params(graph, params)
    optimized, arrays = optimize(graph, arrays, target)
    fused = fuse(optimized, arrays)
    _dump("fused graph", fused)
    plan = plan_build(fused, target)
    show = sys.stderr.isatty() if progress is None else progress
    so_path, sources = _compile_and_link(plan, target, graph.name, show, records)
    metadata = _metadata(graph, fused, plan, target, sources)
    params_out = {value.name: arrays[value.name] for value in optimized.params}
    return Library(so_path, metadata, params_out, sources)


def checked_params(graph: Graph, params: Mapping[str, np.ndarray] | None) -> Params:
    params = params or {}
    missing = [value.name for value in graph.params if value.name not in params]
    if missing:
        raise BuildError(
            f"graph {graph.name!r} needs params {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''} that were not given: pass "
            "params=<the dict returned with the graph>"
        )
    arrays: Params = {}
    for value in graph.params:
        array = np.asarray(params[value.name])
        if TensorType.of(array) != value.type:
            raise BuildError(
                f"param {value.name!r} is {TensorType.of(array)}, the graph expects "
                f"{value.type}: pass the params that belong to this graph"
            )
        arrays[value.name] = array
    return arrays


def optimize(
    graph: Graph, params: Mapping[str, np.ndarray], target: Target | None = None
) -> tuple[Graph, Params]:
    """The graph passes of a CPU build (step 1 of the module docstring); with a
    `target`, constant weights are also packed for its vectors."""
    result, arrays = fold_constants(graph, params)
    result, arrays = fold_batch_norm(result, arrays)
    result, arrays = convert_layout(result, arrays, "NHWC")
    result, arrays = simplify(result, arrays)  # after convert_layout: merges its transposes
    if target is not None:  # last: the passes before it know no packed ops
        result, arrays = pack_weights(result, arrays, target)
    if result.inputs != graph.inputs or result.outputs != graph.outputs:
        raise BuildError(
            f"the graph passes changed the inputs or outputs of {graph.name!r}; this is a "
            "bug in Ember, please report it with the model"
        )
    # Last: a param that is also a graph output may be renamed; outputs are matched
    # by position from here on, and their names come from the original graph.
    result, arrays = _safe_param_names(result, arrays)
    _dump("optimized graph", result)
    return result, arrays


def _safe_param_names(graph: Graph, params: Params) -> tuple[Graph, Params]:
    """Params renamed where their names are not plain ASCII the C runtime can match in
    a safetensors header (letters, digits, `_.:/-`)."""
    supply = NameSupply.for_graph(graph)
    renamed = {
        value.name: Value(supply.fresh(value.name), value.type)
        for value in graph.params
        if not _SAFE_NAME.fullmatch(value.name)
    }
    if not renamed:
        return graph, params

    def swap(values: tuple[Value, ...]) -> tuple[Value, ...]:
        return tuple(renamed.get(value.name, value) for value in values)

    nodes = tuple(
        Node(node.op, swap(node.inputs), node.outputs, node.attrs, node.name)
        for node in graph.nodes
    )
    result = graph.replace(nodes=nodes, params=swap(graph.params), outputs=swap(graph.outputs))
    return result, {(renamed[n].name if n in renamed else n): a for n, a in params.items()}


def _dump(what: str, item: object) -> None:
    if debug_enabled():
        print(f"[ember] {what}:\n{item}", file=sys.stderr)


# -- plan ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class KernelJob:
    """One kernel to generate: the DAG of the first group with its workload key."""

    name: str
    workload_key: str
    group: FusedGroup
    dag: ComputeDAG

    @property
    def symbol(self) -> str:
        """The packed entry the AOT entry point calls (ember/codegen/c.py)."""
        return f"{self.name}_packed"


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


@dataclass(frozen=True, slots=True, eq=False)
class BuildPlan:
    """What to compile (`kernels`) and how the entry point runs (`program`)."""

    program: AotProgram
    memory: MemoryPlan
    kernels: tuple[KernelJob, ...]
    groups: tuple[GroupRecord, ...]


def plan_build(fused: FusedGraph, target: Target) -> BuildPlan:
    """Place every tensor and list the steps of the entry point, one per group."""
    graph = fused.graph
    locations = _boundary_locations(graph)
    memory = plan_memory(_intermediate_lifetimes(fused, locations))
    for allocation in memory.allocations:
        locations[allocation.tensor.name] = BufferRef(Region.ARENA, allocation.offset)
    steps: list[Step] = []
    kernels: dict[str, KernelJob] = {}
    records: list[GroupRecord] = []
    for group in fused.groups:
        if _runs_in_helper(group):
            step = _helper_step(group, locations)
            steps.append(step)
            records.append(_record(group, f"ember_topk_{step.dtype}", None))
            continue
        dag, _ = group_to_dag(group)
        key = dag.workload_key
        job = kernels.setdefault(key, KernelJob(_kernel_name(group, key), key, group, dag))
        refs = tuple(locations[value.name] for value in (*group.inputs, *group.outputs))
        steps.append(KernelStep(group.name, job.symbol, refs))
        records.append(_record(group, job.name, key))
    steps.extend(_output_copies(graph, locations))
    program = AotProgram(
        target=str(target),
        inputs=tuple(_spec(value) for value in graph.inputs),
        outputs=tuple(_spec(value) for value in graph.outputs),
        params=tuple(_spec(value) for value in graph.params),
        arena_bytes=memory.arena_bytes,
        steps=tuple(steps),
    )
    return BuildPlan(program, memory, tuple(kernels.values()), tuple(records))


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
    fused: FusedGraph, boundary: Mapping[str, BufferRef]
) -> list[TensorLifetime]:
    """Each tensor groups pass between them (and the unused outputs a helper writes
    anyway), from the step that writes it to the last step that reads it."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for step, group in enumerate(fused.groups):
        for value in group.inputs:
            if value.name in first:
                last[value.name] = step
        written = group.nodes[0].outputs if _runs_in_helper(group) else group.outputs
        for value in written:
            if value.name not in boundary:
                first[value.name] = last[value.name] = step
                sizes[value.name] = value.type.nbytes
    return [TensorLifetime(name, sizes[name], first[name], last[name]) for name in first]


def _runs_in_helper(group: FusedGroup) -> bool:
    """Whether the group is an op no kernel can express (a hand-written C helper runs
    it, or the build refuses it)."""
    return group.kind == GroupKind.OPAQUE and group.nodes[0].op in NOT_EXPRESSIBLE


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


def _kernel_name(group: FusedGroup, workload_key: str) -> str:
    """A C name from the group's ops and the workload key: stable across networks,
    so a kernel's object file is shared by every network with that workload. (Not
    `ember_...`: the C renderer keeps that prefix for its helpers.)"""
    ops = "_".join(node.op for node in group.nodes[:4])
    digest = hashlib.sha256(workload_key.encode()).hexdigest()[:10]
    return re.sub(r"[^0-9A-Za-z_]", "_", f"{ops}_{digest}")


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


def _record(group: FusedGroup, kernel: str, workload_key: str | None) -> GroupRecord:
    return GroupRecord(
        name=group.name,
        kind=group.kind.value,
        kernel=kernel,
        workload_key=workload_key,
        inputs=tuple(value.name for value in group.inputs),
        outputs=tuple(value.name for value in group.outputs),
        flops=summarize(group.as_graph()).total_flops,
    )


# -- compile ---------------------------------------------------------------------------


def _compile_and_link(
    plan: BuildPlan,
    target: Target,
    name: str,
    show: bool,
    records: Sequence[MeasureRecord] = (),
) -> tuple[Path, GeneratedSources]:
    """Every object compiled in parallel (cached), then linked into one library; also
    the generated sources, as compiled. Kernels are lowered on this thread while
    earlier ones compile."""
    entry_point = render_entry_point(plan.program)
    _dump("AOT entry point", entry_point)
    kernels: list[KernelSource] = []
    with (
        ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool,
        _progress_bar(show, f"building {name}", len(plan.kernels)) as advance,
    ):
        futures: list[Future[Path]] = [
            pool.submit(compile_object, source, target, _OBJECT_FLAGS)
            for source in (*runtime_sources(), entry_point)
        ]
        for job in plan.kernels:
            kernel = _kernel_source(job, target, records)
            kernels.append(kernel)
            future = pool.submit(compile_object, kernel.c_source, target, _OBJECT_FLAGS)
            future.add_done_callback(lambda _: advance())
            futures.append(future)
        objects = [future.result() for future in futures]
    return link_shared(objects, target), GeneratedSources(entry_point, tuple(kernels))


def _tuning_records(
    source: str | os.PathLike[str] | Sequence[object] | None,
) -> list[MeasureRecord]:
    if source is None:
        return []
    if isinstance(source, str | os.PathLike):
        return load_records(source)
    records = list(source)
    for record in records:
        if not isinstance(record, MeasureRecord):
            raise BuildError(
                f"tuning_records must be a records file or MeasureRecords, not a list "
                f"holding {type(record).__name__}"
            )
    return records  # type: ignore[return-value]


def _schedule(
    job: KernelJob, target: Target, records: Sequence[MeasureRecord]
) -> tuple[State, bool]:
    """The best record's schedule for the job's workload, else the default one."""
    best = load_best(records, job.workload_key, target) if records else None
    if best is not None:
        try:
            return replay(job.dag, best.steps), True
        except ScheduleError as error:
            warnings.warn(
                f"the tuning record for kernel {job.name} does not apply to its DAG "
                f"({error}); it gets its default schedule",
                stacklevel=4,
            )
    return default_schedule(job.dag, target), False


def _kernel_source(
    job: KernelJob, target: Target, records: Sequence[MeasureRecord] = ()
) -> KernelSource:
    state, tuned = _schedule(job, target, records)
    func = lower(state, job.name)
    if entry_symbols(func)[1] != job.symbol:
        raise BuildError(
            f"kernel {job.name} was rendered with entry {entry_symbols(func)[1]}, not "
            f"{job.symbol}; this is a bug in Ember, please report it"
        )
    return KernelSource(job.name, kernel_source(func), func, tuned)


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

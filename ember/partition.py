"""A graph split into the kernels that run it: the one split `ember.build` and
`ember.autoschedule.extract_tasks` share, so every task is a kernel the build compiles.

    part = partition(graph, params, target)
    part.graph, part.params     # after the graph passes (`optimize`)
    part.fused.groups           # the fused groups, in the order they run
    part.kernels                # the distinct kernels (workload key and output views)
    part.kernel_of(group)       # a group's kernel; None for a group a C helper runs
    part.in_place               # concat groups no step runs: their inputs' slices

Steps, in order:

1. `optimize`: fold_constants, fold_batch_norm, convert_layout to NHWC (CPU kernels
   vectorise over the innermost channel axis), then simplify, which must come after
   convert_layout to merge the transposes it leaves, then read_through (layout chains
   copied per reader, a dense's row reshape moved in front of it), then winograd and
   pack_weights (constant dense/matmul/conv weights re-laid out in blocks of the
   target's vector lanes).
   Param names are made safe for the safetensors reader in C. Inputs and outputs keep
   their names and layouts: the transposes to and from NHWC are inside the library.
2. `fuse` into groups.
3. each group that a kernel can express becomes a ComputeDAG (`group_to_dag`); groups
   with the same workload key share one kernel, whose `count` says how many run it.
4. concatenations in place: a group that is one `concat`, each of whose inputs is a
   distinct value that only it reads, written by a kernel, runs no kernel of its own.
   Each producer's kernel stores its output as a view (`OutputView`) of the
   concatenated tensor, which the memory plan places once; so two kernels of one
   workload key may differ in their views, and `kernels` lists each pair.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ember.config import debug_dump
from ember.errors import BuildError
from ember.graph.ir import Graph, NameSupply, Node, Params, TensorType, Value
from ember.graph.ops.attrs import AxisAttrs
from ember.graph.passes import (
    FusedGraph,
    FusedGroup,
    GroupKind,
    convert_layout,
    fold_batch_norm,
    fold_constants,
    fuse,
    quantized_ops,
    read_through,
    simplify,
)
from ember.graph.passes.pack_weights import pack_weights
from ember.graph.passes.winograd import winograd
from ember.names import c_identifier
from ember.schedule.lower import OutputView
from ember.target import Target
from ember.te.dag import ComputeDAG
from ember.topi import NOT_EXPRESSIBLE, group_to_dag

_SAFE_NAME = re.compile(r"[A-Za-z0-9_.:/-]+")


@dataclass(frozen=True, slots=True, eq=False)
class KernelSpec:
    """One distinct kernel: the DAG of the first group with its workload key, the
    graph values its inputs stand for, which of those are constant params, and how
    many groups run it."""

    name: str
    workload_key: str
    group: FusedGroup
    dag: ComputeDAG
    inputs: tuple[Value, ...]
    count: int
    views: tuple[tuple[int, OutputView], ...] = ()  # (position in dag.outputs, view)

    @property
    def weight_inputs(self) -> tuple[int, ...]:
        """Positions in `dag.inputs` of the first group's params (its weights)."""
        params = {value.name for value in self.group.params}
        return tuple(i for i, value in enumerate(self.inputs) if value.name in params)


@dataclass(frozen=True, slots=True, eq=False)
class Partition:
    """A graph after the passes, its fused groups and its distinct kernels."""

    graph: Graph
    params: Params
    fused: FusedGraph
    kernels: tuple[KernelSpec, ...]
    _by_group: Mapping[str, KernelSpec]
    # concat group name -> the view of each of its inputs (by value name) in its output
    in_place: Mapping[str, Mapping[str, OutputView]] = field(default_factory=dict)

    def kernel_of(self, group: FusedGroup) -> KernelSpec | None:
        """The kernel that runs `group`; None when a C helper runs it or it is an
        in-place concatenation (`in_place`)."""
        return self._by_group.get(group.name)


def partition(graph: Graph, params: Mapping[str, np.ndarray] | None, target: Target) -> Partition:
    """`graph` (with its `params`, checked) split into kernels for `target`."""
    optimized, arrays = optimize(graph, checked_params(graph, params), target)
    fused = fuse(optimized, arrays)
    debug_dump("fused graph", fused)
    dags = {group.name: group_to_dag(group) for group in fused.groups if not runs_in_helper(group)}
    in_place = _in_place_concats(fused, dags)
    view_of = {name: view for views in in_place.values() for name, view in views.items()}
    # A kernel is one workload key with one set of output views.
    identity_of: dict[str, tuple[str, tuple[tuple[int, OutputView], ...]]] = {}
    first_group: dict[tuple[str, tuple[tuple[int, OutputView], ...]], FusedGroup] = {}
    for group in fused.groups:
        if group.name not in dags or group.name in in_place:
            continue
        views = tuple(
            (position, view_of[value.name])
            for position, value in enumerate(group.outputs)
            if value.name in view_of
        )
        identity = (dags[group.name][0].workload_key, views)
        identity_of[group.name] = identity
        first_group.setdefault(identity, group)
    counts = Counter(identity_of.values())
    kernels = {}
    for identity, group in first_group.items():
        (key, views), (dag, inputs) = identity, dags[group.name]
        name = kernel_name(group, key + "".join(f"|{p}:{v}" for p, v in views))
        kernels[identity] = KernelSpec(name, key, group, dag, inputs, counts[identity], views)
    by_group = {name: kernels[identity] for name, identity in identity_of.items()}
    return Partition(optimized, arrays, fused, tuple(kernels.values()), by_group, in_place)


def _in_place_concats(
    fused: FusedGraph, dags: Mapping[str, tuple[ComputeDAG, tuple[Value, ...]]]
) -> dict[str, dict[str, OutputView]]:
    """The concat groups that can run in place (see the module docstring), each with
    the view of every input in the concatenated output. An input's producer must be
    a kernel (not a C helper, not another in-place concat) whose DAG computes it in a
    tensor of its own, and the input must have no other reader, graph outputs
    included: the value exists only as its slice of the concatenation."""
    producer = {value.name: group for group in fused.groups for value in group.outputs}
    readers: dict[str, int] = {value.name: 1 for value in fused.graph.outputs}
    for group in fused.groups:
        for value in group.inputs:
            readers[value.name] = readers.get(value.name, 0) + 1
    in_place: dict[str, dict[str, OutputView]] = {}
    for group in fused.groups:
        (node, *others) = group.nodes
        if others or node.op != "concat" or group.name not in dags:
            continue
        names = [value.name for value in node.inputs]
        if len(set(names)) != len(names) or not all(
            readers[name] == 1
            and name in producer
            and producer[name].name in dags
            and producer[name].name not in in_place
            and _computes_own_tensor(producer[name], name, dags)
            for name in names
        ):
            continue
        assert isinstance(node.attrs, AxisAttrs)
        output_shape = node.output.shape
        axis = node.attrs.axis % len(output_shape)
        views, offset = {}, 0
        for value in node.inputs:
            origin = tuple(offset if dim == axis else 0 for dim in range(len(output_shape)))
            views[value.name] = OutputView(output_shape, origin)
            offset += value.shape[axis]
        in_place[group.name] = views
    return in_place


def _computes_own_tensor(
    group: FusedGroup, name: str, dags: Mapping[str, tuple[ComputeDAG, tuple[Value, ...]]]
) -> bool:
    """Whether the DAG of `group` computes its output `name` in a tensor of its own
    (not one of its inputs, not another of its outputs)."""
    dag, _ = dags[group.name]
    position = [value.name for value in group.outputs].index(name)
    tensor = dag.outputs[position]
    taken = [t for t in (*dag.inputs, *dag.outputs) if t is tensor]
    return len(taken) == 1


def runs_in_helper(group: FusedGroup) -> bool:
    """Whether the group is an op no kernel can express (a hand-written C helper runs
    it, or the build refuses it)."""
    return group.kind == GroupKind.OPAQUE and group.nodes[0].op in NOT_EXPRESSIBLE


def kernel_name(group: FusedGroup, workload_key: str) -> str:
    """A C name from the group's ops and the workload key: stable across networks,
    so a kernel's object file is shared by every network with that workload. (Not
    `ember_...`: the C renderer keeps that prefix for its helpers.)"""
    ops = "_".join(node.op for node in group.nodes[:4])
    digest = hashlib.sha256(workload_key.encode()).hexdigest()[:10]
    return c_identifier(f"{ops}_{digest}")


def checked_params(graph: Graph, params: Mapping[str, np.ndarray] | None) -> Params:
    """`params` as arrays, each checked against the graph's param of that name."""
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
    result, arrays = quantized_ops(graph, params)  # first: it reads weights' dequantizations
    result, arrays = fold_constants(result, arrays)
    result, arrays = fold_batch_norm(result, arrays)
    result, arrays = convert_layout(result, arrays, "NHWC")
    result, arrays = simplify(result, arrays)  # after convert_layout: merges its transposes
    # After simplify (its slices of gathers); before pack_weights (it knows `dense`).
    result, arrays = read_through(result, arrays)
    if target is not None:
        # Before pack_weights, which would pack the convs this rewrites; after
        # convert_layout, since it rewrites only channels-last convs.
        result, arrays = winograd(result, arrays, target)
        # Last: the passes before it know no packed ops.
        result, arrays = pack_weights(result, arrays, target)
    if result.inputs != graph.inputs or result.outputs != graph.outputs:
        raise BuildError(
            f"the graph passes changed the inputs or outputs of {graph.name!r}; this is a "
            "bug in Ember, please report it with the model"
        )
    # Last: a param that is also a graph output may be renamed; outputs are matched
    # by position from here on, and their names come from the original graph.
    result, arrays = _safe_param_names(result, arrays)
    debug_dump("optimized graph", result)
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

"""convert_layout: run the spatial ops of a graph channels-last (or channels-first).

CPU kernels vectorise over the innermost axis, so Ember prefers channels-last data
(DESIGN.md). ONNX models arrive channels-first. This pass rewrites every spatial op
(conv, pools, global pools, batch and instance norm, depth_to_space, space_to_depth)
whose data is in the source layout into the target layout, re-lays out conv weights on
the param arrays (OIHW -> HWIO, so no weight is transposed at run time), lets the
layout-agnostic ops between them follow the data's layout, and inserts transposes only
where the logical layout matters.

Every value of the original graph is *placed* in the new graph: a new value plus a
permutation `perm` with `new == numpy.transpose(old, perm)`. An identity `perm` means
"same layout as before". Each node is rewritten by the first rule that applies:

| op                                    | rule                                           |
| ------------------------------------- | ---------------------------------------------- |
| conv, max/avg/global pools,           | in the source layout: converted (data placed   |
| instance_norm, depth/space blocks     | channels-last, `layout` attr changed; conv's   |
|                                       | weight permuted to the matching kernel layout) |
| batch_norm on the channel axis        | converted, `axis` moved to the new C position  |
| elementwise and broadcast ops         | follow the first permuted input; other         |
| (attrs without axes)                  | operands are permuted too (constants on the    |
|                                       | param arrays: a bias [C,1,1] becomes [1,1,C])  |
| concat, split, slice, pad, tile,      | follow the permuted input with axis attrs      |
| resize, broadcast_to, softmax,        | remapped (reductions without keepdims drop the |
| log_softmax, reductions, argmax/min   | reduced axes from the permutation)             |
| transpose of a permuted value         | no node: the output is the input re-labelled   |
| reshape of a permuted value that      | reads the permuted value directly (same        |
| moves only length-1 axes              | row-major order), no transpose                 |
| anything else (dense, gather, other   | border: inputs are transposed back first       |
| reshapes, layer_norm, ...)            |                                                |

Followers only follow when an input is permuted, so a graph without spatial ops is
returned unchanged. Transposes are cached per value and composed with the transpose
that produced their input (a transpose of a transpose is one transpose, or none).

Pre: `graph` verifies; `params` holds every param's array.
Post: the result verifies and computes the same outputs (same names, types and values
up to fp32 reordering) as the input. No transpose sits between two converted ops.
Graph inputs and outputs keep their layout unless `convert_inputs=True`: then every
graph input read by a converted spatial op becomes channels-last itself (its shape
changes; the caller feeds transposed data) and every output that ends channels-last
stays so (no transpose before it). Params that are re-laid out appear under a new name
(`w1_hwio`, `b1_nhwc`); the originals are dropped when nothing reads them any more.
Nodes that no output needs are dropped. `layout="NCHW"` runs the same tables the other
way: channels-last spatial ops become channels-first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import (
    Attrs,
    Graph,
    NoAttrs,
    Node,
    Params,
    TensorType,
    Value,
    prune_params,
    remove_dead_nodes,
    rename_values,
)
from ember.graph.ops import OpPattern, get_op
from ember.graph.ops.attrs import (
    AlphaAttrs,
    ArgReduceAttrs,
    BatchNormAttrs,
    CastAttrs,
    ClipAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    ReduceAttrs,
    ReshapeAttrs,
    SeluAttrs,
    TransposeAttrs,
)
from ember.graph.ops.layout import SPATIAL_LETTERS, channels_first, channels_last
from ember.graph.ops.reduce import reduced_axes
from ember.graph.passes.rewrite import NameSupply, defined_by_nodes, make_node

Perm = tuple[int, ...]

CHANNELS_LAST_NAMES = ("NWC", "NHWC", "NDHWC")
CHANNELS_FIRST_NAMES = ("NCW", "NCHW", "NCDHW")

# Ops whose `layout` attr names their data layout; all data is input 0.
SPATIAL_OPS = frozenset(
    {
        "conv",
        "max_pool",
        "avg_pool",
        "global_avg_pool",
        "global_max_pool",
        "instance_norm",
        "depth_to_space",
        "space_to_depth",
    }
)

# Elementwise and broadcast ops with these attrs types have no axis-dependent attrs, so
# they compute the same thing in any layout.
_AXIS_FREE_ATTRS = (
    NoAttrs,
    AlphaAttrs,
    SeluAttrs,
    HardSigmoidAttrs,
    GeluAttrs,
    ClipAttrs,
    CastAttrs,
)


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def permute(values: Sequence[Any], perm: Perm) -> tuple[Any, ...]:
    """`values` re-ordered like the axes of `numpy.transpose(x, perm)`."""
    return tuple(values[axis] for axis in perm)


@dataclass(frozen=True, slots=True)
class _Direction:
    """Which layout the pass converts from and to, per tensor rank (3, 4 or 5)."""

    to_channels_last: bool

    def _layout(self, rank: int, channels_last_wanted: bool) -> str | None:
        spatial_rank = rank - 2
        if spatial_rank not in SPATIAL_LETTERS:
            return None
        return channels_last(spatial_rank) if channels_last_wanted else channels_first(spatial_rank)

    def source(self, rank: int) -> str | None:
        return self._layout(rank, not self.to_channels_last)

    def target(self, rank: int) -> str | None:
        return self._layout(rank, self.to_channels_last)

    def data_perm(self, rank: int) -> Perm | None:
        source, target = self.source(rank), self.target(rank)
        if source is None or target is None:
            return None
        return tuple(source.index(axis) for axis in target)

    def kernel_layout(self, rank: int) -> str:
        letters = SPATIAL_LETTERS[rank - 2]
        return letters + "IO" if self.to_channels_last else "OI" + letters

    def label(self, perm: Perm) -> str:
        """How a value placed with `perm` is named: its layout's letters, lower case."""
        source = self.source(len(perm))
        if source is None:
            return "t" + "".join(str(axis) for axis in perm)
        return "".join(source[axis] for axis in perm).lower()

    def converts(self, node: Node) -> bool:
        """Whether `node` is a spatial op in the source layout (one this pass rewrites)."""
        rank = node.inputs[0].type.ndim if node.inputs else 0
        source = self.source(rank)
        if source is None:
            return False
        if node.op in SPATIAL_OPS:
            return getattr(node.attrs, "layout", None) == source
        if node.op == "batch_norm" and isinstance(node.attrs, BatchNormAttrs):
            return node.attrs.axis == source.index("C")
        return False


def _direction_for(layout: str) -> _Direction:
    if layout in CHANNELS_LAST_NAMES:
        return _Direction(to_channels_last=True)
    if layout in CHANNELS_FIRST_NAMES:
        return _Direction(to_channels_last=False)
    raise ShapeError(
        f"convert_layout: unknown target layout {layout!r}; use a channels-last layout "
        f"({', '.join(CHANNELS_LAST_NAMES)}) or a channels-first one "
        f"({', '.join(CHANNELS_FIRST_NAMES)})"
    )


class _LayoutRewriter:
    """The state of one convert_layout run: placements, new nodes, new params."""

    def __init__(self, graph: Graph, params: Mapping[str, np.ndarray], direction: _Direction):
        self.direction = direction
        self.names = NameSupply(graph)
        self.arrays: Params = dict(params)
        self.original_params = {value.name for value in graph.params}
        self.param_values: list[Value] = list(graph.params)
        self.nodes: list[Node] = []
        self.placements: dict[str, tuple[Value, Perm]] = {
            value.name: (value, identity(value.type.ndim)) for value in graph.params
        }
        # (original value name, perm) -> the value holding it in that layout.
        self.variants: dict[tuple[str, Perm], Value] = {}
        # New transpose outputs -> (their input, their perm), for composing transposes.
        self.transposed_from: dict[str, tuple[Value, Perm]] = {}

    # -- placements ----------------------------------------------------------------

    def place(self, old: Value, new: Value, perm: Perm) -> None:
        self.placements[old.name] = (new, perm)

    def perm_of(self, value: Value) -> Perm:
        return self.placements[value.name][1]

    def is_param(self, value: Value) -> bool:
        return value.name in self.original_params

    def followed_perm(self, values: Sequence[Value], rank: int) -> Perm | None:
        """The placement of the first rank-`rank` value that is permuted, if any."""
        for value in values:
            perm = self.perm_of(value)
            if value.type.ndim == rank and perm != identity(rank):
                return perm
        return None

    def in_layout(self, value: Value, perm: Perm, label: str | None = None) -> Value:
        """`value` (of the original graph) as `numpy.transpose(value, perm)` in the new
        graph: a permuted param array, a cached or new transpose, or the value itself."""
        current, current_perm = self.placements[value.name]
        if current_perm == perm:
            return current
        key = (value.name, perm)
        if key not in self.variants:
            name = f"{value.name}_{label or self.direction.label(perm)}"
            if self.is_param(value):
                array = np.ascontiguousarray(np.transpose(self.arrays[value.name], perm))
                self.variants[key] = self.new_param(name, array)
            else:
                relative = tuple(current_perm.index(axis) for axis in perm)
                self.variants[key] = self.transpose(current, relative, name)
        return self.variants[key]

    # -- emitting ------------------------------------------------------------------

    def new_param(self, hint: str, array: np.ndarray) -> Value:
        value = Value(self.names.fresh(hint), TensorType.of(array))
        self.arrays[value.name] = array
        self.param_values.append(value)
        return value

    def emit(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: Attrs,
        name: str,
        output_names: Sequence[str] | None = None,
    ) -> tuple[Value, ...]:
        node = make_node(op, inputs, attrs, name=name, output_names=output_names)
        self.nodes.append(node)
        if op == "transpose" and isinstance(attrs, TransposeAttrs):
            self.transposed_from[node.output.name] = (inputs[0], attrs.perm)
        return node.outputs

    def transpose(self, value: Value, perm: Perm, hint: str) -> Value:
        """`numpy.transpose(value, perm)` of a new-graph value, folded into the
        transpose that produced `value` if there is one."""
        source, applied = self.transposed_from.get(value.name, (value, identity(len(perm))))
        combined = permute(applied, perm)
        if combined == identity(len(perm)):
            return source
        name = self.names.fresh(hint)
        (result,) = self.emit("transpose", [source], TransposeAttrs(combined), name)
        return result

    def reshape(self, value: Value, shape: tuple[int, ...], hint: str) -> Value:
        (result,) = self.emit("reshape", [value], ReshapeAttrs(shape), self.names.fresh(hint))
        return result

    def emit_like(
        self, node: Node, inputs: Sequence[Value], attrs: Attrs, perms: Sequence[Perm]
    ) -> None:
        """Re-emit `node` (same name, same output names) and place its outputs."""
        names = [value.name for value in node.outputs]
        outputs = self.emit(node.op, inputs, attrs, node.name, names)
        for old, new, perm in zip(node.outputs, outputs, perms, strict=True):
            self.place(old, new, perm)

    def emit_border(self, node: Node) -> None:
        """`node` as it was, reading every input in its original layout."""
        inputs = [self.in_layout(value, identity(value.type.ndim)) for value in node.inputs]
        perms = [identity(value.type.ndim) for value in node.outputs]
        self.emit_like(node, inputs, node.attrs, perms)


# -- rules: each rewrites one node and returns True, or returns False to decline ---------

Rule = Callable[[_LayoutRewriter, Node], bool]


def _convert_spatial(rewriter: _LayoutRewriter, node: Node) -> bool:
    """conv, pools, instance_norm, depth/space blocks in the source layout."""
    direction = rewriter.direction
    if not direction.converts(node):
        return False
    rank = node.inputs[0].type.ndim
    perm = direction.data_perm(rank)
    assert perm is not None  # converts() checked the rank
    inputs = [rewriter.in_layout(node.inputs[0], perm)]
    changes: dict[str, str | None] = {"layout": direction.target(rank)}
    if node.op == "conv":
        kernel_layout = direction.kernel_layout(rank)
        old_kernel_layout: str = getattr(node.attrs, "kernel_layout")  # noqa: B009
        kernel_perm = tuple(old_kernel_layout.index(axis) for axis in kernel_layout)
        inputs.append(rewriter.in_layout(node.inputs[1], kernel_perm, kernel_layout.lower()))
        changes["kernel_layout"] = kernel_layout
    # Per-channel vectors (instance_norm's scale and bias) do not depend on the layout.
    for value in node.inputs[len(inputs) :]:
        inputs.append(rewriter.in_layout(value, identity(value.type.ndim)))
    attrs = replace(node.attrs, **changes)
    rewriter.emit_like(node, inputs, attrs, [perm] * len(node.outputs))
    return True


def _convert_batch_norm(rewriter: _LayoutRewriter, node: Node) -> bool:
    direction = rewriter.direction
    if not direction.converts(node) or not isinstance(node.attrs, BatchNormAttrs):
        return False
    rank = node.inputs[0].type.ndim
    perm = direction.data_perm(rank)
    assert perm is not None
    inputs = [rewriter.in_layout(node.inputs[0], perm)]
    inputs += [rewriter.in_layout(v, identity(v.type.ndim)) for v in node.inputs[1:]]
    attrs = replace(node.attrs, axis=perm.index(node.attrs.axis))
    rewriter.emit_like(node, inputs, attrs, [perm])
    return True


def _follow_elementwise(rewriter: _LayoutRewriter, node: Node) -> bool:
    """Elementwise and broadcast ops follow their first permuted full-rank input."""
    if not isinstance(node.attrs, _AXIS_FREE_ATTRS) or len(node.outputs) != 1:
        return False
    perm = rewriter.followed_perm(node.inputs, node.output.type.ndim)
    if perm is None:
        return False
    inputs = [_broadcast_operand(rewriter, value, perm) for value in node.inputs]
    rewriter.emit_like(node, inputs, node.attrs, [perm])
    return True


def _broadcast_operand(rewriter: _LayoutRewriter, value: Value, perm: Perm) -> Value:
    """A broadcast operand of an op computing in layout `perm`: full-rank operands are
    transposed; lower-rank ones are padded with leading 1s (as broadcasting does),
    permuted, and stripped of the leading 1s again, down to their own rank."""
    rank, own_rank = len(perm), value.type.ndim
    if own_rank == rank:
        return rewriter.in_layout(value, perm)
    padded = (1,) * (rank - own_rank) + value.type.shape
    moved = permute(padded, perm)
    leading_ones = next((i for i, size in enumerate(moved) if size != 1), rank)
    shape = moved[min(leading_ones, rank - own_rank) :]
    # Moving only axes of length 1 leaves the elements in order: a reshape suffices.
    in_order = _keeps_element_order(padded, perm)
    key = (value.name, perm)
    if in_order and shape == value.type.shape:
        return rewriter.in_layout(value, identity(own_rank))
    if key not in rewriter.variants:
        hint = f"{value.name}_{rewriter.direction.label(perm)}"
        if rewriter.is_param(value):
            array = np.transpose(rewriter.arrays[value.name].reshape(padded), perm)
            rewriter.variants[key] = rewriter.new_param(
                hint, np.ascontiguousarray(array.reshape(shape))
            )
        else:
            base = rewriter.in_layout(value, identity(own_rank))
            if in_order:
                rewriter.variants[key] = rewriter.reshape(base, shape, hint)
            else:
                expanded = rewriter.reshape(base, padded, f"{value.name}_expanded")
                rewriter.variants[key] = rewriter.transpose(expanded, perm, hint)
    return rewriter.variants[key]


def _remap_axis(attrs: Any, perm: Perm) -> Attrs:
    return replace(attrs, axis=perm.index(attrs.axis))


def _remap_pads(attrs: Any, perm: Perm) -> Attrs:
    rank = len(perm)
    begins, ends = attrs.pads[:rank], attrs.pads[rank:]
    return replace(attrs, pads=permute(begins, perm) + permute(ends, perm))


def _remap_slice(attrs: Any, perm: Perm) -> Attrs:
    return replace(
        attrs,
        begins=permute(attrs.begins, perm),
        ends=permute(attrs.ends, perm),
        steps=permute(attrs.steps, perm),
    )


def _remap_per_axis(*fields: str) -> Callable[[Any, Perm], Attrs]:
    """For attrs holding one entry per axis in each of `fields`."""

    def remap(attrs: Any, perm: Perm) -> Attrs:
        return replace(attrs, **{name: permute(getattr(attrs, name), perm) for name in fields})

    return remap


# op -> how its attrs change when its data is placed with `perm` (same rank in and out).
AXIS_REMAPS: dict[str, Callable[[Any, Perm], Attrs]] = {
    "concat": _remap_axis,
    "split": _remap_axis,
    "softmax": _remap_axis,
    "log_softmax": _remap_axis,
    "slice": _remap_slice,
    "pad": _remap_pads,
    "tile": _remap_per_axis("reps"),
    "resize": _remap_per_axis("sizes", "scales"),
    "broadcast_to": _remap_per_axis("shape"),
}


def _follow_with_axes(rewriter: _LayoutRewriter, node: Node) -> bool:
    """Same-rank data-movement and axis ops: remap the axis attrs and follow."""
    rank = node.inputs[0].type.ndim
    if any(value.type.ndim != rank for value in (*node.inputs, *node.outputs)):
        return False  # e.g. broadcast_to a higher rank
    perm = rewriter.followed_perm(node.inputs, rank)
    if perm is None:
        return False
    inputs = [rewriter.in_layout(value, perm) for value in node.inputs]
    attrs = AXIS_REMAPS[node.op](node.attrs, perm)
    rewriter.emit_like(node, inputs, attrs, [perm] * len(node.outputs))
    return True


def _follow_reduction(rewriter: _LayoutRewriter, node: Node) -> bool:
    """reduce_* and argmax/argmin: axes remapped; without keepdims the placement of the
    output is the input's with the reduced axes taken out."""
    data = node.inputs[0]
    perm = rewriter.followed_perm([data], data.type.ndim)
    if perm is None:
        return False
    attrs: Any = node.attrs
    if isinstance(attrs, ArgReduceAttrs):
        axes: tuple[int, ...] = (attrs.axis,)
        new_attrs = _remap_axis(attrs, perm)
    else:
        axes = reduced_axes(attrs, data.type.ndim)
        # An empty tuple means every axis in either layout.
        new_attrs = replace(attrs, axes=tuple(sorted(perm.index(axis) for axis in attrs.axes)))
    out_perm = perm
    if not attrs.keepdims:
        kept = [axis for axis in range(len(perm)) if axis not in axes]
        out_perm = tuple(kept.index(axis) for axis in perm if axis not in axes)
    rewriter.emit_like(node, [rewriter.in_layout(data, perm)], new_attrs, [out_perm])
    return True


def _follow_transpose(rewriter: _LayoutRewriter, node: Node) -> bool:
    """A transpose of a permuted value needs no node: its output is the same physical
    tensor, placed with the permutation that relates the two logical layouts."""
    data = node.inputs[0]
    current, current_perm = rewriter.placements[data.name]
    if current_perm == identity(data.type.ndim) or not isinstance(node.attrs, TransposeAttrs):
        return False
    # current = transpose(data, current_perm) and output = transpose(data, attrs.perm).
    out_perm = tuple(node.attrs.perm.index(axis) for axis in current_perm)
    rewriter.place(node.output, current, out_perm)
    return True


def _follow_reshape(rewriter: _LayoutRewriter, node: Node) -> bool:
    """A reshape reads its input in row-major order. When the placement moves only
    axes of length 1 (a global pool's [N,1,1,C] for [N,C,1,1]) that order is the same
    in both layouts, so the reshape reads the permuted value directly."""
    data = node.inputs[0]
    current, perm = rewriter.placements[data.name]
    if not _keeps_element_order(data.type.shape, perm) or perm == identity(len(perm)):
        return False
    rewriter.emit_like(node, [current], node.attrs, [identity(node.output.type.ndim)])
    return True


def _keeps_element_order(shape: Sequence[int], perm: Perm) -> bool:
    """Whether `numpy.transpose(x, perm)` of a `shape` array lists its elements in the
    same row-major order as `x` (only axes of length 1 move)."""
    moved = [axis for axis in perm if shape[axis] != 1]
    return moved == sorted(moved)


RULES: dict[str, Rule] = {
    **{op: _convert_spatial for op in SPATIAL_OPS},
    "batch_norm": _convert_batch_norm,
    **{op: _follow_with_axes for op in AXIS_REMAPS},
    **{op: _follow_reduction for op in ("argmax", "argmin")},
    "transpose": _follow_transpose,
    "reshape": _follow_reshape,
}


def _rule_for(op: str) -> Rule | None:
    if op in RULES:
        return RULES[op]
    opdef = get_op(op)
    if opdef.attrs_type in (ReduceAttrs, ArgReduceAttrs):
        return _follow_reduction
    if opdef.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST):
        return _follow_elementwise
    return None


# -- the pass ----------------------------------------------------------------------------


def convert_layout(
    graph: Graph,
    params: Mapping[str, np.ndarray],
    layout: str = "NHWC",
    convert_inputs: bool = False,
) -> tuple[Graph, Params]:
    """Rewrite the spatial ops of `graph` into `layout` (see the module docstring).

    `layout` is "NHWC" (channels-last; "NWC" and "NDHWC" mean the same) or "NCHW"
    (channels-first). With `convert_inputs=True` the graph's inputs and outputs take
    the new layout too, instead of being transposed at the borders."""
    direction = _direction_for(layout)
    rewriter = _LayoutRewriter(graph, params, direction)
    converted_inputs = _inputs_to_convert(graph, direction) if convert_inputs else set()
    inputs = tuple(
        _place_input(rewriter, value, value.name in converted_inputs) for value in graph.inputs
    )
    for node in graph.nodes:
        rule = _rule_for(node.op)
        if rule is None or not rule(rewriter, node):
            rewriter.emit_border(node)
    outputs = tuple(_output_value(rewriter, value, convert_inputs) for value in graph.outputs)
    result = Graph(
        inputs=inputs,
        outputs=outputs,
        nodes=tuple(rewriter.nodes),
        params=tuple(rewriter.param_values),
        name=graph.name,
    )
    result = _restore_output_names(result, [value.name for value in graph.outputs], rewriter)
    return prune_params(remove_dead_nodes(result), rewriter.arrays)


def _inputs_to_convert(graph: Graph, direction: _Direction) -> set[str]:
    """Graph inputs that some converted spatial op reads as its data."""
    return {
        node.inputs[0].name
        for node in graph.nodes
        if direction.converts(node) and node.inputs[0] in graph.inputs
    }


def _place_input(rewriter: _LayoutRewriter, value: Value, convert: bool) -> Value:
    rank = value.type.ndim
    perm = rewriter.direction.data_perm(rank) if convert else None
    if perm is None:
        rewriter.place(value, value, identity(rank))
        return value
    new = Value(value.name, TensorType(permute(value.type.shape, perm), value.type.dtype))
    rewriter.place(value, new, perm)
    return new


def _output_value(rewriter: _LayoutRewriter, value: Value, keep_converted: bool) -> Value:
    current, perm = rewriter.placements[value.name]
    if keep_converted and perm == rewriter.direction.data_perm(value.type.ndim):
        return current
    return rewriter.in_layout(value, identity(value.type.ndim))


def _restore_output_names(graph: Graph, wanted: Sequence[str], rewriter: _LayoutRewriter) -> Graph:
    """Give output i its original name `wanted[i]` (users fetch outputs by name). A
    value holding that name inside the graph (say, the channels-last result before the
    transpose back) is renamed after its layout; an output value that cannot take the
    name (a graph input, or already another output) gets an identity copy."""
    for index, name in enumerate(wanted):
        if graph.outputs[index].name == name:
            continue
        if name in defined_by_nodes(graph.nodes):
            perm = rewriter.placements[name][1] if name in rewriter.placements else None
            label = rewriter.direction.label(perm) if perm else "internal"
            graph = _rename(graph, {name: rewriter.names.fresh(f"{name}_{label}")})
        value = graph.outputs[index]
        earlier = {v.name for v in graph.outputs[:index]}
        if value.name in defined_by_nodes(graph.nodes) and value.name not in earlier:
            graph = _rename(graph, {value.name: name})
        else:
            copy = make_node("identity", [value], NoAttrs(), name=name)
            outputs = (*graph.outputs[:index], copy.output, *graph.outputs[index + 1 :])
            graph = graph.replace(nodes=(*graph.nodes, copy), outputs=outputs)
    return graph


def _rename(graph: Graph, new_names: Mapping[str, str]) -> Graph:
    """Rename node outputs, and the nodes named after them (the builder's convention)."""
    graph = rename_values(graph, new_names)
    nodes = tuple(
        replace(node, name=new_names[node.name])
        if node.name in new_names and new_names[node.name] in {v.name for v in node.outputs}
        else node
        for node in graph.nodes
    )
    return graph.replace(nodes=nodes)

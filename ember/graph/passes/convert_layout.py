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
"same layout as before" (`layout_placement.py` keeps the placements). Each node is
rewritten by the first rule that applies:

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
from dataclasses import replace
from typing import Any

import numpy as np

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
    SeluAttrs,
    TransposeAttrs,
)
from ember.graph.ops.reduce import reduced_axes
from ember.graph.passes.layout_placement import (
    SPATIAL_OPS,
    Direction,
    LayoutRewriter,
    Perm,
    direction_for,
    identity,
    permute,
)
from ember.graph.passes.rewrite import defined_by_nodes, keeps_element_order, make_node

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


# -- rules: each rewrites one node and returns True, or returns False to decline ---------

Rule = Callable[[LayoutRewriter, Node], bool]


def _convert_spatial(rewriter: LayoutRewriter, node: Node) -> bool:
    """conv, pools, instance_norm, depth/space blocks in the source layout."""
    direction = rewriter.direction
    if not direction.converts(node):
        return False
    rank = node.inputs[0].type.ndim
    perm = direction.data_perm(rank)
    assert perm is not None  # converts() checked the rank
    inputs = [rewriter.in_layout(node.inputs[0], perm)]
    changes: dict[str, str | None] = {"layout": direction.target(rank)}
    if node.op in ("conv", "qconv"):
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


def _convert_batch_norm(rewriter: LayoutRewriter, node: Node) -> bool:
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


def _follow_elementwise(rewriter: LayoutRewriter, node: Node) -> bool:
    """Elementwise and broadcast ops follow their first permuted full-rank input."""
    if not isinstance(node.attrs, _AXIS_FREE_ATTRS) or len(node.outputs) != 1:
        return False
    perm = rewriter.followed_perm(node.inputs, node.output.type.ndim)
    if perm is None:
        return False
    inputs = [_broadcast_operand(rewriter, value, perm) for value in node.inputs]
    rewriter.emit_like(node, inputs, node.attrs, [perm])
    return True


def _broadcast_operand(rewriter: LayoutRewriter, value: Value, perm: Perm) -> Value:
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
    in_order = keeps_element_order(padded, perm)
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


def _follow_with_axes(rewriter: LayoutRewriter, node: Node) -> bool:
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


def _follow_reduction(rewriter: LayoutRewriter, node: Node) -> bool:
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


def _follow_transpose(rewriter: LayoutRewriter, node: Node) -> bool:
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


def _follow_reshape(rewriter: LayoutRewriter, node: Node) -> bool:
    """A reshape reads its input in row-major order. When the placement moves only
    axes of length 1 (a global pool's [N,1,1,C] for [N,C,1,1]) that order is the same
    in both layouts, so the reshape reads the permuted value directly."""
    data = node.inputs[0]
    current, perm = rewriter.placements[data.name]
    if not keeps_element_order(data.type.shape, perm) or perm == identity(len(perm)):
        return False
    rewriter.emit_like(node, [current], node.attrs, [identity(node.output.type.ndim)])
    return True


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
    direction = direction_for(layout)
    rewriter = LayoutRewriter(graph, params, direction)
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


def _inputs_to_convert(graph: Graph, direction: Direction) -> set[str]:
    """Graph inputs that some converted spatial op reads as its data."""
    return {
        node.inputs[0].name
        for node in graph.nodes
        if direction.converts(node) and node.inputs[0] in graph.inputs
    }


def _place_input(rewriter: LayoutRewriter, value: Value, convert: bool) -> Value:
    rank = value.type.ndim
    perm = rewriter.direction.data_perm(rank) if convert else None
    if perm is None:
        rewriter.place(value, value, identity(rank))
        return value
    new = Value(value.name, TensorType(permute(value.type.shape, perm), value.type.dtype))
    rewriter.place(value, new, perm)
    return new


def _output_value(rewriter: LayoutRewriter, value: Value, keep_converted: bool) -> Value:
    current, perm = rewriter.placements[value.name]
    if keep_converted and perm == rewriter.direction.data_perm(value.type.ndim):
        return current
    return rewriter.in_layout(value, identity(value.type.ndim))


def _restore_output_names(graph: Graph, wanted: Sequence[str], rewriter: LayoutRewriter) -> Graph:
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

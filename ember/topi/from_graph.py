"""Graph -> ComputeDAG: one fused group (or a whole small graph) as one compute DAG.

Every external input of the group (data inputs and params alike) becomes a
`placeholder`, in the group's input order, so the kernel's arguments are
`(*inputs, *outputs)` in that order. Each node becomes the stages of its compute
declaration, and epilogue ops stay stages of their own (`T_add`, `T_relu`) for the
schedule to inline. One rewrite happens on the way: a zero-valued constant `pad` whose
only reader is a conv (the prologue `fuse` puts into the conv's group) is folded into
the conv's own padding, so the DAG pads once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ember.graph.ir import Graph, Node, Value
from ember.graph.ops.attrs import ConvAttrs, PadAttrs
from ember.graph.ops.layout import parse_data_layout
from ember.te import ComputeDAG, Tensor, placeholder
from ember.topi.registry import declare

if TYPE_CHECKING:  # only the type: topi does not depend on the passes at run time
    from ember.graph.passes.fuse import FusedGroup


def group_to_dag(group: FusedGroup) -> tuple[ComputeDAG, tuple[Value, ...]]:
    """The group's ComputeDAG, and the group value each DAG input stands for."""
    return _translate(group.nodes, group.inputs, group.outputs)


def graph_to_dag(graph: Graph) -> tuple[ComputeDAG, tuple[Value, ...]]:
    """A whole graph as one ComputeDAG; its inputs are the graph's inputs, then its
    params."""
    return _translate(graph.nodes, (*graph.inputs, *graph.params), graph.outputs)


def _translate(
    nodes: Sequence[Node], inputs: Sequence[Value], outputs: Sequence[Value]
) -> tuple[ComputeDAG, tuple[Value, ...]]:
    tensors: dict[str, Tensor] = {}
    placeholders = []
    for value in inputs:
        tensor = placeholder(value.shape, value.dtype)
        tensors[value.name] = tensor
        placeholders.append(tensor)
    folded = _foldable_pads(nodes, outputs)
    for node in nodes:
        if node.name in folded.values():
            continue
        inputs_read = list(node.inputs)
        attrs = node.attrs
        pad = folded.get(node.name)
        if pad is not None:  # the conv reads the pad's input and pads it itself
            source = next(n for n in nodes if n.name == pad)
            inputs_read[0] = source.inputs[0]
            attrs = _merged_padding(node, source)
        operands = [tensors[value.name] for value in inputs_read]
        results = declare(node.op, operands, attrs, [value.type for value in node.outputs])
        for value, tensor in zip(node.outputs, results, strict=True):
            tensors[value.name] = tensor
    dag = ComputeDAG([tensors[value.name] for value in outputs], placeholders)
    return dag, tuple(inputs)


def _foldable_pads(nodes: Sequence[Node], outputs: Sequence[Value]) -> dict[str, str]:
    """conv node name -> name of the zero constant pad of its data that it absorbs
    (the pad's only reader is the conv, and it pads spatial axes only)."""
    output_names = {value.name for value in outputs}
    readers: dict[str, list[Node]] = {}
    for node in nodes:
        for value in node.inputs:
            readers.setdefault(value.name, []).append(node)
    folded: dict[str, str] = {}
    for node in nodes:
        attrs = node.attrs
        if node.op != "pad" or not isinstance(attrs, PadAttrs):
            continue
        if attrs.mode != "constant" or attrs.value != 0 or node.output.name in output_names:
            continue
        users = readers.get(node.output.name, [])
        if (
            len(users) != 1
            or users[0].op not in ("conv", "conv_pack")
            or users[0].inputs[0] != node.output
        ):
            continue
        conv = users[0]
        assert isinstance(conv.attrs, ConvAttrs)
        layout = parse_data_layout(conv.attrs.layout, "conv", len(node.output.shape))
        rank = len(node.output.shape)
        if any(
            attrs.pads[a] or attrs.pads[rank + a] for a in (layout.batch_axis, layout.channel_axis)
        ):
            continue
        folded[conv.name] = node.name
    return folded


def _merged_padding(conv: Node, pad: Node) -> ConvAttrs:
    """The conv's attrs with the pad's spatial padding added to its own."""
    attrs, pads = conv.attrs, pad.attrs
    assert isinstance(attrs, ConvAttrs) and isinstance(pads, PadAttrs)
    rank = len(pad.output.shape)
    layout = parse_data_layout(attrs.layout, "conv", rank)
    spatial = layout.spatial_rank
    begins = [attrs.padding[m] + pads.pads[a] for m, a in enumerate(layout.spatial_axes)]
    ends = [
        attrs.padding[spatial + m] + pads.pads[rank + a] for m, a in enumerate(layout.spatial_axes)
    ]
    return replace(attrs, padding=(*begins, *ends))

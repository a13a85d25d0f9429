"""read_through: reshape the graph so that kernels read through layout ops rather
than store copies made by them.

`fuse` lets a matmul or dense read its operands through a single-reader chain of
reshapes, transposes and slices, and lets an injective group inline the layout ops
before it; a layout op with several readers, or a reshape between a dense and its
epilogue, stops both, and its output is stored as a copy. Two rewrites remove those
stops:

1. A reshape, transpose or slice whose output is read only by other such ops, two or
   more of them, is copied once per reader; a split whose outputs are all read by
   such ops alone becomes one slice per output (timm's `qkv.permute(...).unbind(0)`
   exports as a split). Attention splits its projection into q,
   k and v this way: one reshape/transpose of the (tokens, 3 x channels) product read by
   three slices (after `simplify` turned the gathers of index 0, 1 and 2 into slices).
   Copied, each slice's chain reads the product itself: a pure index map that the
   matmul reads through, or that a transposing copy inlines, instead of a copy of the
   whole product made first (ViT-B/16: 0.1 ms a layer).
2. A reshape of a dense's output that keeps its last axis (it only regroups the rows)
   moves in front of the dense: dense(x) then reshape -> dense(reshape(x)), also
   across a bias add or other elementwise op with a constant broadcast along the last
   axis. The dense's epilogue (a residual add of the reshaped shape) then fuses into
   it, and the reshape before it merges with the reshape making x or is read through.

Pre: `graph` verifies; run before `pack_weights` (rule 2 knows `dense`, not its
packed form). Post: the graph computes the same values (each rewrite only moves or
copies index maps); no layout op of rule 1 is left with several layout readers; the
inputs are not modified.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from ember.graph.ir import Graph, NameSupply, Node, Params, Value
from ember.graph.ops import OpPattern, get_op
from ember.graph.ops.attrs import ReshapeAttrs, SliceAttrs, SplitAttrs
from ember.graph.passes.fuse import READ_THROUGH_OPS
from ember.graph.passes.rewrite import make_node


def read_through(graph: Graph, params: Mapping[str, np.ndarray]) -> tuple[Graph, Params]:
    """Apply both rewrites of the module docstring to a fixed point."""
    current = graph
    while True:
        rewritten = (
            _split_into_slices(current)
            or _copy_shared_layout(current)
            or _reshape_before_dense(current, params)
        )
        if rewritten is None:
            return current, dict(params)
        current = rewritten


def _readers(graph: Graph) -> dict[str, list[Node]]:
    readers: dict[str, list[Node]] = defaultdict(list)
    for node in graph.nodes:
        for value in dict.fromkeys(node.inputs):
            readers[value.name].append(node)
    return readers


def _split_into_slices(graph: Graph) -> Graph | None:
    """Rule 1's split: the first split whose outputs only layout ops read, as slices."""
    readers = _readers(graph)
    outputs = {value.name for value in graph.outputs}
    for position, node in enumerate(graph.nodes):
        if node.op != "split" or not isinstance(node.attrs, SplitAttrs):
            continue
        reading = [readers.get(value.name, []) for value in node.outputs]
        if any(value.name in outputs for value in node.outputs) or not all(
            reader.op in READ_THROUGH_OPS for pieces in reading for reader in pieces
        ):
            continue
        (x,) = node.inputs
        axis = node.attrs.axis if node.attrs.axis >= 0 else node.attrs.axis + x.type.ndim
        slices: list[Node] = []
        begin = 0
        for value, size in zip(node.outputs, node.attrs.sizes, strict=True):
            window = SliceAttrs.along(x.shape, axis, begin, begin + size)
            # Each slice is named after the piece it makes (the split node goes).
            slices.append(make_node("slice", (x,), window, name=value.name))
            begin += size
        nodes = [*graph.nodes[:position], *slices, *graph.nodes[position + 1 :]]
        return graph.replace(nodes=tuple(nodes))
    return None


def _copy_shared_layout(graph: Graph) -> Graph | None:
    """Rule 1 for the last layout op (in graph order) it applies to, else None. The last
    first, so that a chain of shared ops is copied from its end back."""
    readers = _readers(graph)
    outputs = {value.name for value in graph.outputs}
    for position in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[position]
        if node.op not in READ_THROUGH_OPS:
            continue
        reading = readers.get(node.output.name, [])
        if (
            len(reading) < 2
            or node.output.name in outputs
            or any(reader.op not in READ_THROUGH_OPS for reader in reading)
        ):
            continue
        names = NameSupply.for_graph(graph)
        copies: list[Node] = []
        renamed: dict[str, Value] = {}  # reader name -> the copy's output it reads
        for reader in reading[1:]:
            name = names.fresh(node.name)
            copy = make_node(node.op, node.inputs, node.attrs, name=name, output_names=[name])
            copies.append(copy)
            renamed[reader.name] = copy.output
        nodes = [*graph.nodes[: position + 1], *copies, *graph.nodes[position + 1 :]]
        return graph.replace(nodes=tuple(_reading(n, node.output, renamed) for n in nodes))
    return None


def _reading(node: Node, value: Value, renamed: Mapping[str, Value]) -> Node:
    """`node`, reading renamed[node.name] where it read `value`."""
    new = renamed.get(node.name)
    if new is None:
        return node
    inputs = tuple(new if operand.name == value.name else operand for operand in node.inputs)
    return Node(node.op, inputs, node.outputs, node.attrs, node.name)


def _reshape_before_dense(graph: Graph, params: Mapping[str, np.ndarray]) -> Graph | None:
    """Rule 2 for the first reshape it applies to, else None."""
    readers = _readers(graph)
    outputs = {value.name for value in graph.outputs}
    producers = {value.name: node for node in graph.nodes for value in node.outputs}
    constant = {value.name for value in graph.params if value.name in params}

    def only_read_by(value: Value, node: Node) -> bool:
        reading = readers.get(value.name, [])
        return len(reading) == 1 and reading[0] is node and value.name not in outputs

    for reshape in graph.nodes:
        if reshape.op != "reshape":
            continue
        shape = reshape.output.shape
        if not shape or shape[-1] != reshape.inputs[0].shape[-1]:
            continue
        # Back from the reshape through elementwise ops with constants along the last
        # axis to a dense, each value read by the next node alone.
        chain: list[Node] = []
        value, reader = reshape.inputs[0], reshape
        while (producer := producers.get(value.name)) is not None and only_read_by(value, reader):
            if producer.op == "dense":
                return _moved(graph, reshape, producer, chain)
            operand = _pointwise_operand(producer, constant, len(shape))
            if operand is None:
                break
            chain.append(producer)
            value, reader = operand, producer
    return None


def _pointwise_operand(node: Node, constant: set[str], rank: int) -> Value | None:
    """The one non-constant operand of an elementwise or broadcast `node` whose other
    operands are constants that broadcast along the last axis only and have at most
    `rank` axes (so they broadcast the same against the reshaped rows), else None."""
    if get_op(node.op).pattern > OpPattern.BROADCAST:
        return None
    variable = [value for value in node.inputs if value.name not in constant]
    if len(variable) != 1 or variable[0].type != node.output.type:
        return None
    for value in node.inputs:
        if value.name in constant and (
            value.type.ndim > rank or any(extent != 1 for extent in value.shape[:-1])
        ):
            return None
    return variable[0]


def _moved(graph: Graph, reshape: Node, dense: Node, chain: list[Node]) -> Graph:
    """The graph with dense -> chain -> reshape (`chain` listed from the reshape back)
    replaced by reshape(x) -> dense -> chain, whose last node produces the reshape's
    output under its name."""
    names = NameSupply.for_graph(graph)
    x, weight = dense.inputs
    rows = reshape.output.shape[:-1]
    name = names.fresh(reshape.name)
    new_nodes = [make_node("reshape", (x,), ReshapeAttrs((*rows, x.shape[-1])), name=name)]
    value, replaced = new_nodes[0].output, x
    for stage in (dense, *reversed(chain)):
        last = stage is (chain[0] if chain else dense)
        operands = (
            (value, weight)
            if stage is dense
            else tuple(value if operand == replaced else operand for operand in stage.inputs)
        )
        stage_name = reshape.name if last else names.fresh(stage.name)
        output = reshape.output.name if last else stage_name
        new_nodes.append(
            make_node(stage.op, operands, stage.attrs, name=stage_name, output_names=[output])
        )
        value, replaced = new_nodes[-1].output, stage.output
    removed = {id(node) for node in (dense, *chain)}
    nodes: list[Node] = []
    for node in graph.nodes:
        if node is reshape:
            nodes.extend(new_nodes)
        elif id(node) not in removed:
            nodes.append(node)
    return graph.replace(nodes=tuple(nodes))

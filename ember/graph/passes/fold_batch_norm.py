"""Fold inference batch norms into the conv or dense before them.

An inference batch norm is a per-channel affine map `y = x * s + t` with
`s = scale / sqrt(var + epsilon)` and `t = bias - mean * s`. After `conv` or `dense`
(optionally followed by a per-channel bias `add`), the scale `s` is absorbed into the
weight's output channels and `t` becomes the bias `add`; elsewhere the batch norm
becomes a `multiply` and an `add` with per-channel constants.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ember.graph.ir import Graph, NameSupply, Node, Params, TensorType, Value, prune_params
from ember.graph.ops.attrs import BatchNormAttrs, ConvAttrs
from ember.graph.passes.rewrite import make_node


def _conv_channel_axes(node: Node) -> tuple[int, int]:
    attrs = node.attrs
    assert isinstance(attrs, ConvAttrs)
    return attrs.layout.index("C"), attrs.kernel_layout.index("O")


def _dense_channel_axes(node: Node) -> tuple[int, int]:
    # dense(x[..., K], weight[N, K]) -> [..., N]: channels are the last output axis.
    return node.output.type.ndim - 1, 0


# Ops a batch norm folds into (their weight is the second input) -> (the channel axis
# of their output, the output-channel axis of their weight).
_ANCHOR_CHANNEL_AXES: dict[str, Callable[[Node], tuple[int, int]]] = {
    "conv": _conv_channel_axes,
    "dense": _dense_channel_axes,
}


@dataclass(frozen=True, slots=True)
class _Fold:
    """`batch_norm` folded into `anchor` (conv or dense), maybe through `bias_add`."""

    batch_norm: Node
    anchor: Node
    weight_axis: int
    bias_add: Node | None = None
    bias: np.ndarray | None = None  # the bias add's constant as a per-channel vector


def fold_batch_norm(graph: Graph, params: Mapping[str, np.ndarray]) -> tuple[Graph, Params]:
    """Remove every `batch_norm` node whose statistics are constant.

    Pre: `params` holds the arrays of `graph`'s params (run `fold_constants` first, so
    that computed statistics are params where they can be).
    Post: no `batch_norm` node reads only params for its scale, bias, mean and
    variance (one reading statistics computed at run time stays, and its kernel
    computes it). A batch norm after a conv (any layout, any groups) or
    a dense whose weight is a param, directly or through a per-channel bias add, is
    folded: the anchor reads a new, scaled weight param and a bias `add` produces the
    batch norm's output value. The anchor's (and bias add's) output must have no other
    reader and not be a graph output; otherwise, and after any other producer, the
    batch norm becomes `multiply` + `add` with per-channel constant params. Output
    names are kept; params nothing reads any more are dropped; inputs are not modified.
    """
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params if v.name in params}
    folds = _plan_folds(graph, arrays)
    by_anchor = {fold.anchor.output.name: fold for fold in folds.values()}
    bias_adds = {fold.bias_add.output.name for fold in folds.values() if fold.bias_add}
    emitter = _Emitter(NameSupply.for_graph(graph), arrays, list(graph.params))
    nodes: list[Node] = []
    for node in graph.nodes:
        # Nodes of interest have one output; its name identifies them.
        key = node.outputs[0].name if len(node.outputs) == 1 else ""
        if key in bias_adds:
            continue  # its bias moves into the add that replaces the batch norm
        if key in by_anchor:
            nodes.append(emitter.scaled_anchor(by_anchor[key]))
        elif node.op == "batch_norm" and key in folds:
            nodes.append(emitter.folded_bias(folds[key]))
        elif node.op == "batch_norm" and _constant_statistics(node, arrays):
            nodes.extend(emitter.multiply_add(node))
        else:
            nodes.append(node)
    rebuilt = graph.replace(nodes=tuple(nodes), params=tuple(emitter.params))
    return prune_params(rebuilt, emitter.arrays)


def _constant_statistics(node: Node, arrays: Mapping[str, np.ndarray]) -> bool:
    return all(value.name in arrays for value in node.inputs[1:])


def _plan_folds(graph: Graph, arrays: Mapping[str, np.ndarray]) -> dict[str, _Fold]:
    """The batch norms that fold into their anchor, keyed by batch norm output."""
    producers = graph.producers()
    readers: dict[str, list[Node | None]] = {
        name: list(nodes) for name, nodes in graph.consumers().items()
    }
    for value in graph.outputs:
        readers[value.name].append(None)  # None stands for "read as a graph output"
    folds: dict[str, _Fold] = {}
    for node in graph.nodes:
        if node.op == "batch_norm" and _constant_statistics(node, arrays):
            fold = _fold_for(node, producers, readers, arrays)
            if fold is not None:
                folds[node.output.name] = fold
    return folds


def _fold_for(
    batch_norm: Node,
    producers: Mapping[str, Node],
    readers: Mapping[str, list[Node | None]],
    arrays: Mapping[str, np.ndarray],
) -> _Fold | None:
    """How `batch_norm` folds into the anchor before it, or None if it cannot."""
    axis = _axis_of(batch_norm)
    source = batch_norm.inputs[0]
    producer = producers.get(source.name)
    bias_add: Node | None = None
    bias: np.ndarray | None = None
    if producer is not None and producer.op == "add" and readers[source.name] == [batch_norm]:
        found = _split_bias_add(producer, producers, arrays, axis)
        if found is None:
            return None
        source, bias = found
        bias_add, producer = producer, producers[source.name]
    if producer is None or producer.op not in _ANCHOR_CHANNEL_AXES:
        return None
    channel_axis, weight_axis = _ANCHOR_CHANNEL_AXES[producer.op](producer)
    # Scaling the weight changes every reader of the anchor's output, so it must have
    # exactly one: the bias add or the batch norm.
    only_reader = readers[source.name] == [bias_add or batch_norm]
    if channel_axis != axis or producer.inputs[1].name not in arrays or not only_reader:
        return None
    return _Fold(batch_norm, producer, weight_axis, bias_add, bias)


def _split_bias_add(
    add: Node, producers: Mapping[str, Node], arrays: Mapping[str, np.ndarray], axis: int
) -> tuple[Value, np.ndarray] | None:
    """(the anchor's output, per-channel bias vector) if `add` adds a constant
    per-channel bias to a conv or dense output, else None."""
    for side in (0, 1):
        operand, bias = add.inputs[side], add.inputs[1 - side]
        anchor = producers.get(operand.name)
        if anchor is None or anchor.op not in _ANCHOR_CHANNEL_AXES or bias.name not in arrays:
            continue
        if operand.type != add.output.type:
            continue  # the bias would broadcast the anchor's output to a larger shape
        vector = _per_channel(arrays[bias.name], operand.shape, axis)
        if vector is not None:
            return operand, vector
    return None


def _per_channel(array: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """`array` (broadcast against `shape`) as a vector along `axis`, if it only varies
    along that axis."""
    aligned = array.reshape((1,) * (len(shape) - array.ndim) + array.shape)
    if any(size != 1 for index, size in enumerate(aligned.shape) if index != axis):
        return None
    return np.broadcast_to(aligned.reshape(-1), (shape[axis],))


def _affine(batch_norm: Node, arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The batch norm as `x * s + t`: (s, t) in float64, so folding rounds only once."""
    attrs = batch_norm.attrs
    assert isinstance(attrs, BatchNormAttrs)
    scale, bias, mean, variance = (
        arrays[value.name].astype(np.float64) for value in batch_norm.inputs[1:]
    )
    multiplier = scale / np.sqrt(variance + attrs.epsilon)
    return multiplier, bias - mean * multiplier


def _along_axis(vector: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """`vector` shaped to broadcast along `axis` of a rank-`ndim` tensor."""
    return vector.reshape((vector.size,) + (1,) * (ndim - 1 - axis))


class _Emitter:
    """Makes the replacement nodes and the constant params they read."""

    def __init__(self, names: NameSupply, arrays: Params, params: list[Value]) -> None:
        self.names = names
        self.arrays = arrays
        self.params = params

    def constant(self, hint: str, array: np.ndarray) -> Value:
        value = Value(self.names.fresh(hint), TensorType.of(array))
        self.arrays[value.name] = np.asarray(array, order="C")  # keeps 0-d arrays 0-d
        self.params.append(value)
        return value

    def scaled_anchor(self, fold: _Fold) -> Node:
        """The anchor reading its weight scaled by the batch norm's multiplier."""
        anchor, weight = fold.anchor, fold.anchor.inputs[1]
        multiplier, _ = _affine(fold.batch_norm, self.arrays)
        original = self.arrays[weight.name]
        shape = [1] * original.ndim
        shape[fold.weight_axis] = multiplier.size
        scaled = (original.astype(np.float64) * multiplier.reshape(shape)).astype(original.dtype)
        new_weight = self.constant(f"{weight.name}_folded", scaled)
        inputs = (anchor.inputs[0], new_weight, *anchor.inputs[2:])
        return Node(anchor.op, inputs, anchor.outputs, anchor.attrs, anchor.name)

    def folded_bias(self, fold: _Fold) -> Node:
        """`anchor + (t + bias * s)`, producing the batch norm's output value."""
        batch_norm, out = fold.batch_norm, fold.batch_norm.output
        multiplier, shift = _affine(batch_norm, self.arrays)
        if fold.bias is not None:
            shift = shift + fold.bias.astype(np.float64) * multiplier
        axis = _axis_of(batch_norm)
        bias = _along_axis(shift, axis, out.type.ndim).astype(out.dtype)
        bias_value = self.constant(f"{batch_norm.name}_shift", bias)
        return make_node(
            "add",
            [fold.anchor.output, bias_value],
            name=batch_norm.name,
            output_names=[out.name],
        )

    def multiply_add(self, batch_norm: Node) -> list[Node]:
        """`x * s + t` with per-channel constants, producing the batch norm's output."""
        x, out = batch_norm.inputs[0], batch_norm.output
        multiplier, shift = _affine(batch_norm, self.arrays)
        axis, ndim = _axis_of(batch_norm), out.type.ndim
        scale_value = self.constant(
            f"{batch_norm.name}_multiplier", _along_axis(multiplier, axis, ndim).astype(out.dtype)
        )
        shift_value = self.constant(
            f"{batch_norm.name}_shift", _along_axis(shift, axis, ndim).astype(out.dtype)
        )
        multiply = make_node(
            "multiply", [x, scale_value], name=self.names.fresh(f"{batch_norm.name}_multiply")
        )
        add = make_node(
            "add", [multiply.output, shift_value], name=batch_norm.name, output_names=[out.name]
        )
        return [multiply, add]


def _axis_of(batch_norm: Node) -> int:
    attrs = batch_norm.attrs
    assert isinstance(attrs, BatchNormAttrs)
    return attrs.axis

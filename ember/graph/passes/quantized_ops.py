"""quantized_ops: convolutions of dequantized integers become integer convolutions.

A quantized model, as imported, computes a quantized conv in float between its
dequantizations and the quantization of its result:

    x = (float(x_q) - zero_point) * scale_x        (scalar scale and zero point)
    w = float(w_q) * scale_w                       (int8 param, a scale per output channel)
    y = conv(x, w)                                 (then bias, activation, quantize ...)

which is `scale_x * scale_w * sum((x_q - zero_point) * w_q)`. This pass computes the sum
in integers, exactly:

    y = multiply(cast(qconv(x_q, w_q), float32), scale_x * scale_w)

and leaves everything after it (the bias, the activation, the next quantization) as it
is: those are float elementwise ops that fuse into the conv's kernel as its epilogue. The
conv then reads uint8 (or int8) activations and an int8 weight, a quarter of the bytes,
and its products are what the dot-product instructions compute (`qconv_pack`).

Where the pattern does not match (the data's scale or zero point varies per channel, a
weight is computed or has a zero point, a grouped conv), the conv stays float and
computes what the model says, as before.

Pre: the graph as a frontend makes it (weights' dequantizations still nodes: run
before `fold_constants`). Post: each matched conv's output value is the `multiply`
above, under the conv's output name; readers and graph outputs are unchanged; the
dequantization nodes nothing reads any more are gone, with their params.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np

from ember.graph.ir import (
    Graph,
    NameSupply,
    NoAttrs,
    Node,
    Params,
    TensorType,
    Value,
    prune_params,
    remove_dead_nodes,
)
from ember.graph.ops.attrs import CastAttrs, ConvAttrs, QConvAttrs
from ember.graph.ops.layout import parse_data_layout, parse_kernel_layout
from ember.graph.passes.rewrite import make_node


@dataclass(frozen=True, slots=True)
class _Dequantized:
    """`(float(integers) - zero_point) * scale`."""

    integers: Value
    scale: np.ndarray
    zero_point: np.ndarray | None


def quantized_ops(graph: Graph, params: Mapping[str, np.ndarray]) -> tuple[Graph, Params]:
    """Replace each conv of a dequantized tensor and a dequantized int8 weight by a
    `qconv` and its scaling (see the module docstring)."""
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params}
    producers = graph.producers()
    names = NameSupply.for_graph(graph)
    new_params = list(graph.params)
    nodes: list[Node] = []
    for node in graph.nodes:
        replacement = _integer_conv(node, producers, arrays)
        if replacement is None:
            nodes.append(node)
            continue
        data, weight, scale = replacement
        attrs = node.attrs
        assert isinstance(attrs, ConvAttrs)
        zero_point = 0 if data.zero_point is None else int(data.zero_point.reshape(-1)[0])
        conv_fields = {f.name: getattr(attrs, f.name) for f in fields(ConvAttrs)}
        qconv = make_node(
            "qconv",
            [data.integers, weight.integers],
            QConvAttrs(**conv_fields, data_zero_point=zero_point),
            name=names.fresh(f"{node.name}_qconv"),
        )
        as_float = make_node(
            "cast", [qconv.output], CastAttrs("float32"), name=names.fresh(f"{node.name}_float")
        )
        scale_value = Value(names.fresh(f"{node.name}_scale"), TensorType.of(scale))
        arrays[scale_value.name] = scale
        new_params.append(scale_value)
        scaled = make_node(
            "multiply",
            [as_float.output, scale_value],
            NoAttrs(),
            name=names.fresh(f"{node.name}_scaled"),
            output_names=[node.output.name],
        )
        nodes.extend([qconv, as_float, scaled])
    rebuilt = remove_dead_nodes(graph.replace(nodes=tuple(nodes), params=tuple(new_params)))
    return prune_params(rebuilt, arrays)


def _integer_conv(
    node: Node, producers: Mapping[str, Node], arrays: Mapping[str, np.ndarray]
) -> tuple[_Dequantized, _Dequantized, np.ndarray] | None:
    """(data, weight, the output's scale shaped for the output) if `node` is a conv of a
    dequantized tensor (scalar scale and zero point) and a dequantized int8 param (a
    scale per output channel, no zero point) in one group; else None."""
    if node.op != "conv" or not isinstance(node.attrs, ConvAttrs) or node.attrs.groups != 1:
        return None
    data = _dequantized(node.inputs[0], producers, arrays)
    weight = _dequantized(node.inputs[1], producers, arrays)
    if data is None or weight is None:
        return None
    if data.integers.dtype not in ("uint8", "int8") or data.scale.size != 1:
        return None
    if data.zero_point is not None and data.zero_point.size != 1:
        return None
    if weight.integers.dtype != "int8" or weight.integers.name not in arrays:
        return None
    if weight.zero_point is not None:
        return None
    attrs = node.attrs
    layout = parse_data_layout(attrs.layout, "conv", node.output.type.ndim)
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, "conv", layout.spatial_rank)
    weight_scale = _along(weight.scale, weight.integers.shape, kernel_layout.out_axis)
    if weight_scale is None:
        return None
    # The output's channel axis, and the axes after it, broadcast against the output.
    trailing = node.output.type.ndim - 1 - layout.channel_axis
    combined = (data.scale.reshape(()).astype(np.float32) * weight_scale).astype(np.float32)
    return data, weight, combined.reshape((combined.size,) + (1,) * trailing)


def _dequantized(
    value: Value, producers: Mapping[str, Node], arrays: Mapping[str, np.ndarray]
) -> _Dequantized | None:
    """`value` as `(float(integers) - zero_point) * scale` with a constant scale and zero
    point, as `dequantize_value` builds it, or None."""
    multiply = producers.get(value.name)
    if multiply is None or multiply.op != "multiply":
        return None
    centred, scale = multiply.inputs
    if scale.name not in arrays or centred.type != value.type:
        return None
    zero_point: np.ndarray | None = None
    source = producers.get(centred.name)
    if source is not None and source.op == "subtract":
        floats, offset = source.inputs
        if offset.name not in arrays or floats.type != centred.type:
            return None
        zero_point = arrays[offset.name]
        if not np.array_equal(zero_point, np.round(zero_point)):
            return None
        source = producers.get(floats.name)
    if source is None or source.op != "cast" or source.inputs[0].dtype not in ("uint8", "int8"):
        return None
    if zero_point is not None and not zero_point.any():
        zero_point = None
    return _Dequantized(source.inputs[0], arrays[scale.name], zero_point)


def _along(scale: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """A scale broadcast against a tensor of `shape` as a vector along `axis` (one value
    per index), or None if it varies along another axis."""
    aligned = scale.reshape((1,) * (len(shape) - scale.ndim) + scale.shape)
    if any(size != 1 for index, size in enumerate(aligned.shape) if index != axis):
        return None
    return np.broadcast_to(aligned.reshape(-1), (shape[axis],)).astype(np.float32)

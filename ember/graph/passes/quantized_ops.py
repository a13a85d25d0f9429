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

A weight re-laid out after its dequantization (a transpose or reshape, as the TFLite
frontend turns OHWI filters into HWIO) is re-laid out in int8 here.

Depthwise convs (one input channel per group) become grouped qconvs. Products by a
constant quantized weight, `matmul(x, B[K, N])` (also `B = transpose(W[N, K])`, as an
ONNX Gemm with transB imports) and `dense(x, W[N, K])`, become a 1x1 qconv with the
weight as `[1, K, N]` (`[1, 1, K, N]`): 3-d data `[batch, rows, K]` is NWC as it is,
4-d data NHWC, so the sums already have the product's shape and its epilogue fuses;
data of other ranks (a Gemm's `[M, K]`) is reshaped to `[1, rows, K]` and the sums
back. They take the same packed dot-product kernels.

Max pools (dequantization is increasing) and concats of values on one grid (one dtype,
scale and zero point) commute with the dequantization: they run on the integers, and
the dequantization follows them, fused with whatever reads it. Adds, average pools and
concats across grids requantize through float, as ONNX Runtime's QLinearAdd and
QLinearConcat do, and stay float ops fused into their neighbours.

Where the pattern does not match (the data's scale or zero point varies per channel, a
weight is computed or has a zero point, a grouped conv that is not depthwise), the op
stays float and computes what the model says, as before.

Pre: the graph as a frontend makes it (weights' dequantizations still nodes: run
before `fold_constants`). Post: each matched conv's output value is the `multiply`
above, under the conv's output name; readers and graph outputs are unchanged; the
dequantization nodes nothing reads any more are gone, with their params.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from ember.graph.ops import evaluate
from ember.graph.ops.attrs import CastAttrs, ConvAttrs, PoolAttrs, QConvAttrs, ReshapeAttrs
from ember.graph.ops.layout import parse_data_layout, parse_kernel_layout
from ember.graph.passes.rewrite import make_node


@dataclass(frozen=True, slots=True)
class _Dequantized:
    """`(float(integers) - zero_point) * scale`."""

    integers: Value
    scale: np.ndarray
    zero_point: np.ndarray | None
    scale_value: Value
    zero_value: Value | None


def quantized_ops(graph: Graph, params: Mapping[str, np.ndarray]) -> tuple[Graph, Params]:
    """Replace each conv or product of a dequantized tensor and a dequantized int8
    weight by a `qconv` and its scaling (see the module docstring)."""
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params}
    producers = graph.producers()
    names = NameSupply.for_graph(graph)
    new_params = list(graph.params)
    nodes: list[Node] = []

    def param(hint: str, array: np.ndarray) -> Value:
        value = Value(names.fresh(hint), TensorType.of(array))
        arrays[value.name] = array
        new_params.append(value)
        return value

    for node in graph.nodes:
        moved = _integer_move(node, producers, arrays)
        if moved is not None:
            nodes.extend(_moved_nodes(node, *moved, names))
            continue
        conv = _integer_conv(node, producers, arrays)
        product = None if conv is not None else _integer_product(node, producers, arrays)
        if conv is None and product is None:
            nodes.append(node)
            continue
        if conv is not None:
            data, integers_weight, scale = conv
            attrs = node.attrs
            assert isinstance(attrs, ConvAttrs)
        else:
            assert product is not None
            data, integers_weight, scale = product
            spatial_rank = 2 if data.integers.type.ndim == 4 else 1
            attrs = _ONE_BY_ONE[spatial_rank]
            integers_weight = integers_weight.reshape((1,) * spatial_rank + integers_weight.shape)
        weight_value = param(f"{node.name}_weight_int8", integers_weight)
        zero_point = 0 if data.zero_point is None else int(data.zero_point.reshape(-1)[0])
        conv_fields = {f.name: getattr(attrs, f.name) for f in fields(ConvAttrs)}
        qconv_attrs = QConvAttrs(**conv_fields, data_zero_point=zero_point)
        integers = data.integers
        reshaped = product is not None and integers.type.ndim not in (3, 4)
        if reshaped:  # the rows of the product as the pixels of a 1-d conv
            rows = (1, integers.type.size // integers.shape[-1], integers.shape[-1])
            nodes.append(_reshape(integers, rows, names.fresh(f"{node.name}_rows")))
            integers = nodes[-1].output
        qconv = make_node(
            "qconv",
            [integers, weight_value],
            qconv_attrs,
            name=names.fresh(f"{node.name}_qconv"),
        )
        nodes.append(qconv)
        sums = qconv.output
        if reshaped:
            nodes.append(_reshape(sums, node.output.shape, names.fresh(f"{node.name}_sums")))
            sums = nodes[-1].output
        as_float = make_node(
            "cast", [sums], CastAttrs("float32"), name=names.fresh(f"{node.name}_float")
        )
        scaled = make_node(
            "multiply",
            [as_float.output, param(f"{node.name}_scale", scale)],
            NoAttrs(),
            name=names.fresh(f"{node.name}_scaled"),
            output_names=[node.output.name],
        )
        nodes.extend([as_float, scaled])
    rebuilt = remove_dead_nodes(graph.replace(nodes=tuple(nodes), params=tuple(new_params)))
    return prune_params(rebuilt, arrays)


def _integer_conv(
    node: Node, producers: Mapping[str, Node], arrays: Mapping[str, np.ndarray]
) -> tuple[_Dequantized, np.ndarray, np.ndarray] | None:
    """(data, the int8 weight in the conv's kernel layout, the output's scale shaped for
    the output) if `node` is a conv, in one group or depthwise, of a dequantized tensor
    (scalar scale and zero point) and a dequantized int8 param (a scale per output
    channel, no zero point); else None."""
    if node.op != "conv" or not isinstance(node.attrs, ConvAttrs):
        return None
    if node.attrs.groups != 1 and not _is_depthwise(node):
        return None
    data = _dequantized(node.inputs[0], producers, arrays)
    weight = _weight(node.inputs[1], producers, arrays)
    if data is None or weight is None or not _per_tensor(data):
        return None
    integers, scale = weight
    attrs = node.attrs
    layout = parse_data_layout(attrs.layout, "conv", node.output.type.ndim)
    kernel_layout = parse_kernel_layout(attrs.kernel_layout, "conv", layout.spatial_rank)
    weight_scale = _along(scale, integers.shape, kernel_layout.out_axis)
    if weight_scale is None:
        return None
    # The output's channel axis, and the axes after it, broadcast against the output.
    trailing = node.output.type.ndim - 1 - layout.channel_axis
    combined = (data.scale.reshape(()).astype(np.float32) * weight_scale).astype(np.float32)
    return data, integers, combined.reshape((combined.size,) + (1,) * trailing)


def _weight(
    value: Value, producers: Mapping[str, Node], arrays: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray] | None:
    """`value` as a dequantized int8 param with no zero point, maybe re-laid out by a
    transpose or reshape after the dequantization (as the TFLite frontend turns OHWI
    filters into HWIO): (the integers laid out as `value`, the scale broadcast to the
    same shape); else None."""
    relayout = producers.get(value.name)
    if relayout is not None and relayout.op in ("transpose", "reshape"):
        source = relayout.inputs[0]
    else:
        relayout, source = None, value
    weight = _dequantized(source, producers, arrays)
    if weight is None or weight.zero_point is not None:
        return None
    if weight.integers.dtype != "int8" or weight.integers.name not in arrays:
        return None
    integers = arrays[weight.integers.name]
    if integers.size == 0 or weight.scale.ndim > integers.ndim:
        return None
    scale = np.broadcast_to(weight.scale, integers.shape).astype(np.float32)
    if relayout is not None:
        (integers,) = evaluate(relayout.op, [integers], relayout.attrs)
        (scale,) = evaluate(relayout.op, [scale], relayout.attrs)
    return np.ascontiguousarray(integers), np.asarray(scale)


def _integer_move(
    node: Node, producers: Mapping[str, Node], arrays: Mapping[str, np.ndarray]
) -> tuple[list[Value], _Dequantized] | None:
    """(the inputs' integers, their one dequantization) if `node` only moves values and
    so commutes with it: a max pool (dequantization is increasing; every window holds a
    real element) or a concat of values on one grid (the same dtype, scale and zero
    point); else None."""
    if node.op in ("max_pool", "global_max_pool"):
        attrs = node.attrs
        if isinstance(attrs, PoolAttrs):
            rank = len(attrs.kernel)
            pads = zip(attrs.kernel, attrs.padding[:rank], attrs.padding[rank:], strict=True)
            # Windows start inside the data or its left padding (ceil mode too), so
            # with padding narrower than the window each holds a real element.
            if any(max(a, b) >= k for k, a, b in pads):
                return None
        data = _dequantized(node.inputs[0], producers, arrays)
        if data is None or not _per_tensor(data) or float(data.scale.reshape(-1)[0]) <= 0:
            return None
        return [data.integers], data
    if node.op == "concat":
        parts = [_dequantized(value, producers, arrays) for value in node.inputs]
        first = parts[0]
        if first is None or not _per_tensor(first):
            return None
        same = [
            part
            for part in parts
            if part is not None
            and part.integers.dtype == first.integers.dtype
            and _per_tensor(part)
            and np.array_equal(part.scale, first.scale)
            and _same_zero(part.zero_point, first.zero_point)
        ]
        return ([part.integers for part in same], first) if len(same) == len(parts) else None
    return None


def _same_zero(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    a = np.zeros(()) if a is None else a
    b = np.zeros(()) if b is None else b
    return bool(np.array_equal(a.reshape(-1), b.reshape(-1)))


def _moved_nodes(
    node: Node, inputs: list[Value], data: _Dequantized, names: NameSupply
) -> list[Node]:
    """`node` on the integers of its inputs, then their dequantization."""
    moved = make_node(node.op, inputs, node.attrs, name=names.fresh(f"{node.name}_integers"))
    result = [moved]
    floats = make_node(
        "cast", [moved.output], CastAttrs("float32"), name=names.fresh(f"{node.name}_float")
    )
    result.append(floats)
    centred = floats.output
    if data.zero_value is not None:
        result.append(
            make_node(
                "subtract",
                [centred, data.zero_value],
                NoAttrs(),
                name=names.fresh(f"{node.name}_centred"),
            )
        )
        centred = result[-1].output
    result.append(
        make_node(
            "multiply",
            [centred, data.scale_value],
            NoAttrs(),
            name=names.fresh(f"{node.name}_dequantized"),
            output_names=[node.output.name],
        )
    )
    return result


def _is_depthwise(node: Node) -> bool:
    """One input channel per group (a channel multiplier of 1)."""
    attrs = node.attrs
    assert isinstance(attrs, ConvAttrs)
    layout = parse_data_layout(attrs.layout, "conv", node.output.type.ndim)
    channels = node.inputs[0].shape[layout.channel_axis]
    return attrs.groups == channels == node.output.shape[layout.channel_axis]


# A product over the last axis as a 1x1 conv, by the spatial rank: [N, W, K] (3-d data
# and, reshaped to it, any other rank but 4) and [N, H, W, K].
_ONE_BY_ONE = {
    1: ConvAttrs((1,), (0, 0), (1,), 1, "NWC", "WIO"),
    2: ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO"),
}


def _integer_product(
    node: Node, producers: Mapping[str, Node], arrays: Mapping[str, np.ndarray]
) -> tuple[_Dequantized, np.ndarray, np.ndarray] | None:
    """(data, the int8 weight as [K, N], the output's scale [N]) if `node` is
    `matmul(x, B[K, N])` or `dense(x, W[N, K])` of a dequantized tensor (one scale and
    zero point) and a dequantized int8 param (a scale per output column, no zero point),
    B maybe a transpose of such a W; else None."""
    if node.op not in ("matmul", "dense") or node.inputs[0].type.ndim < 2:
        return None
    right = node.inputs[1]
    if right.type.ndim != 2:
        return None
    data = _dequantized(node.inputs[0], producers, arrays)
    weight = _weight(right, producers, arrays)
    if data is None or weight is None or not _per_tensor(data):
        return None
    integers, scale = weight
    rows_are_outputs = node.op == "dense"  # W[N, K]; matmul's B is [K, N]
    column_scale = _along(scale, integers.shape, 0 if rows_are_outputs else 1)
    if column_scale is None:
        return None
    by_columns = integers.T if rows_are_outputs else integers  # [K, N]
    combined = (data.scale.reshape(()).astype(np.float32) * column_scale).astype(np.float32)
    return data, np.ascontiguousarray(by_columns), combined


def _per_tensor(data: _Dequantized) -> bool:
    if data.integers.dtype not in ("uint8", "int8") or data.scale.size != 1:
        return False
    return data.zero_point is None or data.zero_point.size == 1


def _reshape(value: Value, shape: tuple[int, ...], name: str) -> Node:
    return make_node("reshape", [value], ReshapeAttrs(tuple(shape)), name=name)


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
    zero_value: Value | None = None
    source = producers.get(centred.name)
    if source is not None and source.op == "subtract":
        floats, offset = source.inputs
        if offset.name not in arrays or floats.type != centred.type:
            return None
        zero_point, zero_value = arrays[offset.name], offset
        if not np.array_equal(zero_point, np.round(zero_point)):
            return None
        source = producers.get(floats.name)
    if source is None or source.op != "cast" or source.inputs[0].dtype not in ("uint8", "int8"):
        return None
    if zero_point is not None and not zero_point.any():
        zero_point = zero_value = None
    return _Dequantized(source.inputs[0], arrays[scale.name], zero_point, scale, zero_value)


def _along(scale: np.ndarray, shape: Sequence[int], axis: int) -> np.ndarray | None:
    """A weight's scale (broadcast to the weight's `shape`) as a vector along `axis`
    (one value per output channel), or None if it also varies along another axis."""
    per_index = np.moveaxis(np.broadcast_to(scale, tuple(shape)), axis, 0)
    per_index = per_index.reshape(shape[axis], -1)
    if per_index.shape[1] and not (per_index == per_index[:, :1]).all():
        return None
    return np.ascontiguousarray(per_index[:, 0]).astype(np.float32)

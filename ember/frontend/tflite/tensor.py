"""TFLite converters that move data: reshapes, concatenation, padding, transposes,
slices, splits, gathers, casts, and DEQUANTIZE of constant weights (float16 or int8),
which folds into a float32 param.
"""

from __future__ import annotations

import numpy as np

from ember.frontend.quantization import dequantize_value, quantization_constants, quantize_value
from ember.frontend.tflite.registry import TFLiteNode, converter, unsupported
from ember.graph.ir import Value
from ember.graph.ops.attrs import (
    AxisAttrs,
    CastAttrs,
    PadAttrs,
    SliceAttrs,
    SplitAttrs,
    TransposeAttrs,
)


@converter("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def convert_reshape(node: TFLiteNode) -> list[Value]:
    """The model declares the output shape; a reshape to it is what each of these is
    (RESHAPE's new_shape may hold a -1 the declaration has resolved)."""
    return [node.reshape(node.input(0), node.output_shape)]


def _axis(node: TFLiteNode, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise unsupported(node, f"axis {axis} is out of range for rank {rank}")
    return axis % rank


@converter("CONCATENATION")
def convert_concatenation(node: TFLiteNode) -> list[Value]:
    values = [node.input(i) for i in range(len(node.inputs))]
    axis = _axis(node, int(node.option("Axis", 0)), values[0].type.ndim)  # type: ignore[call-overload]
    # The schema has a fused activation here, but LiteRT's float kernel does not apply
    # it (ai-edge-litert 2.3, tests/frontend/test_tflite.py): neither does Ember.
    return [values[0] if len(values) == 1 else node.add("concat", values, AxisAttrs(axis))]


@converter("PAD", "PADV2")
def convert_pad(node: TFLiteNode) -> list[Value]:
    """inputs (data, [rank, 2] paddings, constant value for PADV2)."""
    data = node.input(0)
    pads = node.constant(1, "paddings").reshape(-1, 2).astype(np.int64)
    value = 0.0
    if node.op == "PADV2" and node.optional_input(2) is not None:
        value = float(node.constant(2, "constant value").reshape(-1)[0])
    if (pads < 0).any():
        raise unsupported(node, f"negative paddings {pads.tolist()}")
    attrs = PadAttrs((*pads[:, 0].tolist(), *pads[:, 1].tolist()), "constant", value)
    return [node.add("pad", [data], attrs)]


@converter("MIRROR_PAD")
def convert_mirror_pad(node: TFLiteNode) -> list[Value]:
    data = node.input(0)
    pads = node.constant(1, "paddings").reshape(-1, 2).astype(np.int64)
    mode = int(node.option("Mode", 0))  # type: ignore[call-overload]
    if mode != 0:  # SYMMETRIC repeats the edge; ONNX's reflect (REFLECT) does not
        raise unsupported(node, "SYMMETRIC mirror padding")
    attrs = PadAttrs((*pads[:, 0].tolist(), *pads[:, 1].tolist()), "reflect")
    return [node.add("pad", [data], attrs)]


@converter("TRANSPOSE")
def convert_transpose(node: TFLiteNode) -> list[Value]:
    data = node.input(0)
    perm = tuple(_axis(node, int(p), data.type.ndim) for p in node.constant(1, "perm").reshape(-1))
    return [node.add("transpose", [data], TransposeAttrs(perm))]


def _slice(
    node: TFLiteNode, data: Value, begins: list[int], ends: list[int], steps: list[int]
) -> Value:
    attrs = SliceAttrs(tuple(begins), tuple(ends), tuple(steps))
    return node.add("slice", [data], attrs, "slice")


@converter("SLICE")
def convert_slice(node: TFLiteNode) -> list[Value]:
    """inputs (data, begin, size); a size of -1 runs to the end."""
    data = node.input(0)
    begins = [int(b) for b in node.constant(1, "begin").reshape(-1)]
    sizes = [int(s) for s in node.constant(2, "size").reshape(-1)]
    ends = [d if s == -1 else b + s for b, s, d in zip(begins, sizes, data.shape, strict=True)]
    return [node.reshape(_slice(node, data, begins, ends, [1] * len(begins)), node.output_shape)]


@converter("STRIDED_SLICE")
def convert_strided_slice(node: TFLiteNode) -> list[Value]:
    """inputs (data, begin, end, strides) with begin/end masks (the bound ignored) and
    shrink_axis_mask (the axis dropped after taking one element)."""
    data = node.input(0)
    rank = data.type.ndim
    for field in ("EllipsisMask", "NewAxisMask"):
        if int(node.option(field, 0)):  # type: ignore[call-overload]
            raise unsupported(node, f"{field} is not supported")
    if node.option("Offset", False):
        raise unsupported(node, "offset strided slices are not supported")
    starts = [int(b) for b in node.constant(1, "begin").reshape(-1)]
    stops = [int(e) for e in node.constant(2, "end").reshape(-1)]
    strides = [int(s) for s in node.constant(3, "strides").reshape(-1)]
    begin_mask = int(node.option("BeginMask", 0))  # type: ignore[call-overload]
    end_mask = int(node.option("EndMask", 0))  # type: ignore[call-overload]
    shrink = int(node.option("ShrinkAxisMask", 0))  # type: ignore[call-overload]
    begins, ends, steps = [0] * rank, list(data.shape), [1] * rank
    for axis in range(len(starts)):
        extent, step = data.shape[axis], strides[axis]
        if step == 0:
            raise unsupported(node, "a stride of 0")
        start, stop = starts[axis], stops[axis]
        if shrink >> axis & 1:
            start = start % extent
            begins[axis], ends[axis], steps[axis] = start, start + 1, 1
            continue
        lowest, highest = (0, extent) if step > 0 else (-1, extent - 1)
        start = (0 if step > 0 else extent - 1) if begin_mask >> axis & 1 else start
        stop = (extent if step > 0 else -1) if end_mask >> axis & 1 else stop
        if not begin_mask >> axis & 1 and start < 0:
            start += extent
        if not end_mask >> axis & 1 and stop < 0:
            stop += extent
        begins[axis] = min(max(start, lowest), highest)
        ends[axis] = min(max(stop, lowest), highest)
        steps[axis] = step
    return [node.reshape(_slice(node, data, begins, ends, steps), node.output_shape)]


@converter("SPLIT")
def convert_split(node: TFLiteNode) -> list[Value]:
    """inputs (axis, data): num_splits equal parts."""
    data = node.input(1)
    axis = _axis(node, int(node.constant(0, "axis").reshape(-1)[0]), data.type.ndim)
    count = len(node.output_types)
    size = data.shape[axis] // count
    return list(
        node.builder.add_multi("split", [data], SplitAttrs(axis, (size,) * count), node.name)
    )


@converter("SPLIT_V")
def convert_split_v(node: TFLiteNode) -> list[Value]:
    """inputs (data, size_splits, axis)."""
    data = node.input(0)
    axis = _axis(node, int(node.constant(2, "axis").reshape(-1)[0]), data.type.ndim)
    sizes = [int(s) for s in node.constant(1, "size_splits").reshape(-1)]
    if -1 in sizes:
        sizes[sizes.index(-1)] = data.shape[axis] - (sum(sizes) + 1)
    return list(node.builder.add_multi("split", [data], SplitAttrs(axis, tuple(sizes)), node.name))


@converter("GATHER")
def convert_gather(node: TFLiteNode) -> list[Value]:
    data = node.input(0)
    if int(node.option("BatchDims", 0)):  # type: ignore[call-overload]
        raise unsupported(node, "batch_dims is not supported")
    axis = _axis(node, int(node.option("Axis", 0)), data.type.ndim)  # type: ignore[call-overload]
    return [node.add("gather", [data, node.input(1)], AxisAttrs(axis))]


@converter("CAST")
def convert_cast(node: TFLiteNode) -> list[Value]:
    return [node.add("cast", [node.input(0)], CastAttrs(node.output_types[0].dtype))]


@converter("DEQUANTIZE")
def convert_dequantize(node: TFLiteNode) -> list[Value]:
    """To float32: a float16 tensor by a cast, an integer one by its scales and zero
    points ((q - zero point) * scale, per the quantized dimension). On a constant
    weight it folds into a float32 param at import."""
    data = node.input(0)
    quantization = node.quantization[0]
    if quantization is None:
        if data.dtype != "float16":
            raise unsupported(node, f"dequantizing {data.dtype} without quantization parameters")
        return [node.add("cast", [data], CastAttrs("float32"))]
    scale, zero = quantization_constants(node.builder, *quantization, data.type.ndim)
    return [dequantize_value(node.builder, data, scale, zero, node.name)]


@converter("QUANTIZE")
def convert_quantize(node: TFLiteNode) -> list[Value]:
    """Float32 to the output's grid; or integers from one grid to another (a
    requantize: dequantized, then quantized again)."""
    data = node.input(0)
    out = node.output_quantization[0]
    if out is None:
        raise unsupported(node, "output without quantization parameters")
    if node.quantization[0] is not None:
        scale, zero = quantization_constants(node.builder, *node.quantization[0], data.type.ndim)
        data = dequantize_value(node.builder, data, scale, zero, f"{node.name}_dq")
    scale, zero = quantization_constants(node.builder, *out, data.type.ndim)
    dtype = node.output_types[0].dtype
    return [quantize_value(node.builder, data, scale, zero, dtype, node.name, half_away=True)]

"""ONNX QuantizeLinear and DequantizeLinear (opsets 10-21): the Q/DQ pairs that
`onnxruntime.quantization.quantize_static` writes around float operators.

Each becomes the graph ops that compute it exactly as the spec (and ONNX Runtime)
does, in float32:

    QuantizeLinear:   y = cast(clip(round_half_even(x / scale) + zero_point, qmin, qmax))
    DequantizeLinear: y = (float(x) - float(zero_point)) * scale

per tensor (scalar scale) or per axis (a scale and zero point for each index of
`axis`). A dequantized constant (a weight, an int32 bias) folds into a float param at
import, so a QDQ model imports as the float model it approximates, with its
activations rounded to the quantization grid where the model says so; the
integer kernels that run Q -> op -> DQ as one integer operator are a later graph pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.errors import ModelLoadError, UnsupportedOperatorError
from ember.frontend.onnx.registry import (
    CONVERTERS,
    MICROSOFT_DOMAIN,
    ConversionContext,
    OnnxNode,
    converter,
    dtype_from_onnx,
)
from ember.frontend.onnx.tensor import normalize_axis, reshape_to
from ember.frontend.quantization import QUANTIZED_RANGES, dequantize_value, quantize_value
from ember.graph.ir import NoAttrs, Value
from ember.graph.ops.attrs import CastAttrs, ReduceAttrs


def _broadcast(
    ctx: ConversionContext, node: OnnxNode, value: Value, data: Value, axis: int | None, what: str
) -> Value:
    """`value` (a scale or zero point) shaped to broadcast against `data`: a scalar as
    it is, a vector along `axis`. A constant scale must be positive and finite: with
    0, inf or NaN quantization divides by nothing and implementations disagree."""
    scales = ctx.constant(value) if what.endswith("scale") else None
    if scales is not None and not (np.all(scales > 0) and np.all(np.isfinite(scales))):
        bad = scales[~((scales > 0) & np.isfinite(scales))].flat[0]
        raise ModelLoadError(
            f"{node.where}: {what} {bad} is not a positive finite number; a quantization "
            "scale is the step between two integers: re-quantize the model"
        )
    if value.type.size == 1:
        return reshape_to(ctx, value, (), f"{node.name}_{what}_scalar") if value.shape else value
    if (
        axis is None
        or not 0 <= axis < data.type.ndim
        or value.type.ndim != 1
        or value.shape[0] != data.shape[axis]
    ):
        along = "" if axis is None else f" along axis {axis}"
        raise ModelLoadError(
            f"{node.where}: {what} of shape {list(value.shape)} does not fit data "
            f"{list(data.shape)}{along}: Ember takes a scalar or one value per index of the axis"
        )
    shape = [1] * data.type.ndim
    shape[axis] = value.shape[0]
    return reshape_to(ctx, value, shape, f"{node.name}_{what}_axis")


def _per_axis(
    ctx: ConversionContext, node: OnnxNode, value: Value, data: Value, what: str
) -> Value:
    """QuantizeLinear's and DequantizeLinear's `value` (a scale or zero point) shaped to
    broadcast against `data`: a scalar, or a vector along the node's `axis` (default 1;
    the only axis of a vector)."""
    if value.type.size != 1 and value.type.ndim != 1:
        raise UnsupportedOperatorError(
            f"{node.where}: {what} of shape {list(value.shape)}: blocked quantization "
            "(block_size) is not supported; Ember takes a scalar or one value per index of `axis`"
        )
    if value.type.size == 1:
        return _broadcast(ctx, node, value, data, None, what)  # per tensor: no axis to check
    if data.type.ndim == 1 and "axis" not in node.attrs:
        # ONNX Runtime's quantizer writes a Gemm's per-channel int32 bias this way (the
        # default axis 1 of a vector; its optimizer folds the node before it could fail).
        axis = 0
    else:
        axis = normalize_axis(node, node.int_attr("axis", 1), data.type.ndim)
    return _broadcast(ctx, node, value, data, axis, what)


def _check_blocks(node: OnnxNode) -> None:
    if node.int_attr("block_size", 0):
        raise UnsupportedOperatorError(f"{node.where}: blocked quantization is not supported")


@converter("QuantizeLinear")
def convert_quantize(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    _check_blocks(node)
    x, scale = node.input(0), node.input(1)
    zero_point = node.optional_input(2)
    if zero_point is not None:
        dtype = zero_point.dtype
    elif "output_dtype" in node.attrs and node.int_attr("output_dtype"):
        dtype = dtype_from_onnx(node.int_attr("output_dtype"), f"{node.where} output_dtype")
    else:
        dtype = "uint8"
    if dtype not in QUANTIZED_RANGES:
        raise UnsupportedOperatorError(
            f"{node.where}: quantizing to {dtype} is not supported (Ember quantizes to "
            f"{', '.join(QUANTIZED_RANGES)})"
        )
    if x.dtype != "float32":
        raise UnsupportedOperatorError(f"{node.where}: input of {x.dtype}; Ember quantizes float32")
    scale = _per_axis(ctx, node, scale, x, "scale")
    if zero_point is not None:
        zero_point = _per_axis(ctx, node, zero_point, x, "zero_point")
    return [quantize_value(ctx.builder, x, scale, zero_point, dtype, node.name)]


@converter("DequantizeLinear")
def convert_dequantize(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    _check_blocks(node)
    x, scale = node.input(0), node.input(1)
    zero_point = node.optional_input(2)
    if x.dtype not in (*QUANTIZED_RANGES, "int32"):
        raise UnsupportedOperatorError(
            f"{node.where}: dequantizing {x.dtype} is not supported (Ember dequantizes "
            f"{', '.join((*QUANTIZED_RANGES, 'int32'))})"
        )
    if zero_point is not None and not _is_zero(ctx, zero_point):
        zero_point = _per_axis(ctx, node, zero_point, x, "zero_point")
    else:
        zero_point = None
    scale = _per_axis(ctx, node, scale, x, "scale")
    # An int8 weight stays int8 behind its dequantization (nodes, not a folded float
    # param) for the quantized_ops pass; fold_constants folds what it leaves.
    with ctx.builder.folding(not _is_int8_constant(ctx, x)):
        return [dequantize_value(ctx.builder, x, scale, zero_point, node.name)]


def _is_int8_constant(ctx: ConversionContext, value: Value) -> bool:
    return value.dtype == "int8" and ctx.constant(value) is not None


def _is_zero(ctx: ConversionContext, value: Value) -> bool:
    array = ctx.constant(value)
    return array is not None and not np.any(array)


# -- the QOperator form ---------------------------------------------------------------------
#
# ONNX Runtime's quantizer can also write quantized operators instead of Q/DQ pairs
# (`QuantFormat.QOperator`): QLinearConv and QLinearMatMul in the default domain, and
# QLinearAdd, QLinearMul, QLinearAveragePool, QLinearGlobalAveragePool, QLinearConcat,
# QLinearSigmoid and QLinearLeakyRelu in com.microsoft. Each is the float operator
# between a dequantize of its inputs and a quantize of its output, which is how Ember
# imports it (the float operator's own converter does the rest); ConvInteger and
# MatMulInteger accumulate exactly, in float64, and give int32.


def _dequantized(
    ctx: ConversionContext, node: OnnxNode, first: int, axis: int | None = None
) -> Value:
    """Input `first` dequantized with the scale and zero point that follow it."""
    data, scale = node.input(first), node.input(first + 1)
    zero = node.optional_input(first + 2)
    what = f"input{first}"
    scale = _broadcast(ctx, node, scale, data, axis, f"{what}_scale")
    if zero is not None and _is_zero(ctx, zero):
        zero = None
    if zero is not None:
        zero = _broadcast(ctx, node, zero, data, axis, f"{what}_zero_point")
    with ctx.builder.folding(not _is_int8_constant(ctx, data)):
        return dequantize_value(ctx.builder, data, scale, zero, f"{node.name}_{what}_dq")


def _quantized_output(
    ctx: ConversionContext, node: OnnxNode, value: Value, scale_index: int
) -> Value:
    scale, zero = node.input(scale_index), node.optional_input(scale_index + 1)
    dtype = zero.dtype if zero is not None else "uint8"
    scale = _broadcast(ctx, node, scale, value, None, "output_scale")
    if zero is not None:
        zero = _broadcast(ctx, node, zero, value, None, "output_zero_point")
    return quantize_value(ctx.builder, value, scale, zero, dtype, node.name)


def _float_op(
    ctx: ConversionContext, node: OnnxNode, op_type: str, inputs: list[Value | None],
    drop: tuple[str, ...] = (),
) -> Value:  # fmt: skip
    """The float operator `op_type` on `inputs` with this node's attributes (less
    `drop`), through its own converter."""
    attrs = {k: v for k, v in node.attrs.items() if k not in drop}
    float_node = OnnxNode(op_type, f"{node.name}_float", inputs, attrs)
    result = CONVERTERS[op_type](ctx, float_node)[0]
    assert result is not None
    return result


def _channels_first_only(node: OnnxNode) -> None:
    if node.flag_attr("channels_last", False):
        raise UnsupportedOperatorError(f"{node.where}: channels_last=1 is not supported")


@converter("QLinearConv")
def convert_qlinear_conv(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B):
    B is int32 on the grid of x_scale * w_scale."""
    x = _dequantized(ctx, node, 0)
    weight = _dequantized(ctx, node, 3, axis=0)
    bias = node.optional_input(8)
    bias_float = None
    if bias is not None:
        x_scale = reshape_to(ctx, node.input(1), (), f"{node.name}_x_scale_scalar")
        w_scale = node.input(4)
        if w_scale.shape != bias.shape:
            w_scale = reshape_to(ctx, w_scale, (), f"{node.name}_w_scale_scalar")
        grid = ctx.builder.add("multiply", [x_scale, w_scale], NoAttrs(), f"{node.name}_bias_scale")
        bias_float = dequantize_value(ctx.builder, bias, grid, None, f"{node.name}_bias_dq")
    out = _float_op(ctx, node, "Conv", [x, weight, bias_float])
    return [_quantized_output(ctx, node, out, 6)]


@converter("QLinearMatMul")
def convert_qlinear_matmul(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    a = _dequantized(ctx, node, 0)
    b_data = node.input(3)
    b = _dequantized(ctx, node, 3, axis=b_data.type.ndim - 1)  # a scale per column
    return [_quantized_output(ctx, node, _float_op(ctx, node, "MatMul", [a, b]), 6)]


@converter("QLinearAdd", "QLinearMul", domain=MICROSOFT_DOMAIN)
def convert_qlinear_binary(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point)."""
    a, b = _dequantized(ctx, node, 0), _dequantized(ctx, node, 3)
    op = "Add" if node.op_type == "QLinearAdd" else "Mul"
    return [_quantized_output(ctx, node, _float_op(ctx, node, op, [a, b]), 6)]


@converter("QLinearAveragePool", "QLinearGlobalAveragePool", domain=MICROSOFT_DOMAIN)
def convert_qlinear_pool(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """(X, x_scale, x_zero_point, y_scale, y_zero_point)."""
    _channels_first_only(node)
    op = "AveragePool" if node.op_type == "QLinearAveragePool" else "GlobalAveragePool"
    out = _float_op(ctx, node, op, [_dequantized(ctx, node, 0)], drop=("channels_last",))
    return [_quantized_output(ctx, node, out, 3)]


@converter("QLinearSigmoid", "QLinearLeakyRelu", domain=MICROSOFT_DOMAIN)
def convert_qlinear_activation(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    op = "Sigmoid" if node.op_type == "QLinearSigmoid" else "LeakyRelu"
    return [_quantized_output(ctx, node, _float_op(ctx, node, op, [_dequantized(ctx, node, 0)]), 3)]


@converter("QLinearConcat", domain=MICROSOFT_DOMAIN)
def convert_qlinear_concat(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """(Y_scale, Y_zero_point, then X, X_scale, X_zero_point for each input)."""
    parts = [_dequantized(ctx, node, i) for i in range(2, len(node.inputs), 3)]
    return [_quantized_output(ctx, node, _float_op(ctx, node, "Concat", list(parts)), 0)]


def _integer_operands(ctx: ConversionContext, node: OnnxNode, axis_b: int | None) -> list[Value]:
    """(a, b, a_zero_point, b_zero_point) as exact float64 differences."""
    values = []
    for data_index, zero_index, axis in ((0, 2, None), (1, 3, axis_b)):
        data = node.input(data_index)
        value = ctx.builder.add("cast", [data], CastAttrs("float64"), f"{node.name}_in{data_index}")
        zero = node.optional_input(zero_index)
        if zero is not None and not _is_zero(ctx, zero):
            zero = _broadcast(ctx, node, zero, data, axis, f"zero_point{data_index}")
            zero = ctx.builder.add(
                "cast", [zero], CastAttrs("float64"), f"{node.name}_zp{data_index}"
            )
            value = ctx.builder.add(
                "subtract", [value, zero], NoAttrs(), f"{node.name}_centred{data_index}"
            )
        values.append(value)
    return values


@converter("ConvInteger", "MatMulInteger")
def convert_integer_product(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """Products of integers, accumulated in int32: in float64 every partial sum of
    int8 x int8 products is exact, so the cast back gives ONNX Runtime's int32."""
    if node.op_type == "ConvInteger":
        a, b = _integer_operands(ctx, node, axis_b=0)
        out = _float_op(ctx, node, "Conv", [a, b])
    else:
        b_rank = node.input(1).type.ndim
        a, b = _integer_operands(ctx, node, axis_b=b_rank - 1)
        out = _float_op(ctx, node, "MatMul", [a, b])
    return [ctx.builder.add("cast", [out], CastAttrs("int32"), node.name)]


@converter("DynamicQuantizeLinear")
def convert_dynamic_quantize(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """uint8 quantization with a scale and zero point computed from the data at run
    time, as the spec says: the range [min(x, 0), max(x, 0)] over 255 steps."""
    x = node.input(0)
    builder, name = ctx.builder, node.name
    everything = ReduceAttrs(tuple(range(x.type.ndim)), keepdims=False)
    zero = builder.constant(np.asarray(0.0, np.float32))
    high = builder.add(
        "maximum",
        [builder.add("reduce_max", [x], everything, f"{name}_max"), zero],
        NoAttrs(),
        f"{name}_high",
    )
    low = builder.add(
        "minimum",
        [builder.add("reduce_min", [x], everything, f"{name}_min"), zero],
        NoAttrs(),
        f"{name}_low",
    )
    span = builder.add("subtract", [high, low], NoAttrs(), f"{name}_span")
    scale = builder.add(
        "divide",
        [span, builder.constant(np.asarray(255.0, np.float32))],
        NoAttrs(),
        f"{name}_scale",
    )
    negated = builder.add("negative", [low], NoAttrs(), f"{name}_negated")
    zero_point = quantize_value(builder, negated, scale, None, "uint8", f"{name}_zero_point")
    y = quantize_value(builder, x, scale, zero_point, "uint8", name)
    return [y, scale, zero_point]


@converter("QGemm", domain=MICROSOFT_DOMAIN)
def convert_qgemm(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point):
    C is int32 on the grid of alpha * a_scale * b_scale; without y_scale the output
    stays float."""
    a = _dequantized(ctx, node, 0)
    # A scale per output column: B's axis 0 when it is stored transposed (N, K).
    b = _dequantized(ctx, node, 3, axis=0 if node.flag_attr("transB", False) else 1)
    c = node.optional_input(6)
    c_float = None
    if c is not None:
        alpha = ctx.builder.constant(np.asarray(node.float_attr("alpha", 1.0), np.float32))
        a_scale = reshape_to(ctx, node.input(1), (), f"{node.name}_a_scale_scalar")
        b_scale = node.input(4)
        if b_scale.type.size == 1:
            b_scale = reshape_to(ctx, b_scale, (), f"{node.name}_b_scale_scalar")
        grid = ctx.builder.add("multiply", [a_scale, b_scale], NoAttrs(), f"{node.name}_c_grid")
        grid = ctx.builder.add("multiply", [grid, alpha], NoAttrs(), f"{node.name}_c_scale")
        c_float = dequantize_value(ctx.builder, c, grid, None, f"{node.name}_c_dq")
    out = _float_op(ctx, node, "Gemm", [a, b, c_float], drop=("beta",))
    if node.optional_input(7) is None:
        return [out]
    return [_quantized_output(ctx, node, out, 7)]

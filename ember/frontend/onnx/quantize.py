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
from ember.frontend.onnx.registry import ConversionContext, OnnxNode, converter, dtype_from_onnx
from ember.frontend.onnx.tensor import normalize_axis, reshape_to
from ember.frontend.quantization import QUANTIZED_RANGES, dequantize_value, quantize_value
from ember.graph.ir import Value


def _per_axis(
    ctx: ConversionContext, node: OnnxNode, value: Value, data: Value, what: str
) -> Value:
    """`value` (a scale or zero point) shaped to broadcast against `data`: a scalar as
    it is, a vector along `axis` (default 1)."""
    if value.type.size == 1:
        return reshape_to(ctx, value, (), f"{node.name}_{what}_scalar") if value.shape else value
    if value.type.ndim != 1:
        raise UnsupportedOperatorError(
            f"{node.where}: {what} of shape {list(value.shape)}: blocked quantization "
            "(block_size) is not supported; Ember takes a scalar or one value per index of `axis`"
        )
    axis = normalize_axis(node, node.int_attr("axis", 1), data.type.ndim)
    if value.shape[0] != data.shape[axis]:
        raise ModelLoadError(
            f"{node.where}: {what} has {value.shape[0]} values for axis {axis} of "
            f"{list(data.shape)}"
        )
    shape = [1] * data.type.ndim
    shape[axis] = value.shape[0]
    return reshape_to(ctx, value, shape, f"{node.name}_{what}_axis")


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
    return [dequantize_value(ctx.builder, x, scale, zero_point, node.name)]


def _is_zero(ctx: ConversionContext, value: Value) -> bool:
    array = ctx.constant(value)
    return array is not None and not np.any(array)

"""Quantize and dequantize as graph ops, shared by the frontends that read quantized
models (ONNX QuantizeLinear / DequantizeLinear, TFLite's quantized tensors).

Both are the arithmetic that defines them, in float32:

    quantize:   q = cast(clip(round_half_even(x / scale) + zero_point, qmin, qmax), dtype)
    dequantize: x = (float(q) - float(zero_point)) * scale

with `scale` and `zero_point` values already shaped to broadcast against the data (a
scalar, or one value per index of the quantized axis). On constants they fold at
import (the builder folds), so quantized weights become float params.
"""

from __future__ import annotations

import numpy as np

from ember.graph.builder import GraphBuilder
from ember.graph.ir import NoAttrs, Value
from ember.graph.ops.attrs import CastAttrs, ClipAttrs

# The integer types values are quantized to, with their ranges.
QUANTIZED_RANGES = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
}


def as_float(builder: GraphBuilder, value: Value, name: str) -> Value:
    if value.dtype == "float32":
        return value
    return builder.add("cast", [value], CastAttrs("float32"), name)


def quantize_value(
    builder: GraphBuilder,
    x: Value,
    scale: Value,
    zero_point: Value | None,
    dtype: str,
    name: str,
    half_away: bool = False,
) -> Value:
    """`x` (float32) on the grid of `scale` and `zero_point`, saturated to `dtype`.
    Halves round to even (ONNX, ONNX Runtime), or away from zero with `half_away`
    (TFLite's requantization and average pooling)."""
    scaled = builder.add("divide", [x, scale], NoAttrs(), f"{name}_scaled")
    if half_away:
        # sign(v) * floor(|v| + 1/2)
        magnitude = builder.add("abs", [scaled], NoAttrs(), f"{name}_magnitude")
        half = builder.constant(np.asarray(0.5, np.float32))
        lifted = builder.add("add", [magnitude, half], NoAttrs(), f"{name}_lifted")
        floored = builder.add("floor", [lifted], NoAttrs(), f"{name}_floored")
        sign = builder.add("sign", [scaled], NoAttrs(), f"{name}_sign")
        rounded = builder.add("multiply", [sign, floored], NoAttrs(), f"{name}_rounded")
    else:
        rounded = builder.add("round", [scaled], NoAttrs(), f"{name}_rounded")
    if zero_point is not None:
        offset = as_float(builder, zero_point, f"{name}_zp_float")
        rounded = builder.add("add", [rounded, offset], NoAttrs(), f"{name}_shifted")
    low, high = QUANTIZED_RANGES[dtype]
    clipped = builder.add(
        "clip", [rounded], ClipAttrs(float(low), float(high)), f"{name}_saturated"
    )
    return builder.add("cast", [clipped], CastAttrs(dtype), name)


def dequantize_value(
    builder: GraphBuilder, q: Value, scale: Value, zero_point: Value | None, name: str
) -> Value:
    """The float32 values the integers `q` stand for."""
    value = as_float(builder, q, f"{name}_float")
    if zero_point is not None:
        offset = as_float(builder, zero_point, f"{name}_zp_float")
        value = builder.add("subtract", [value, offset], NoAttrs(), f"{name}_centred")
    return builder.add("multiply", [value, scale], NoAttrs(), name)


def quantization_constants(
    builder: GraphBuilder, scales: np.ndarray, zeros: np.ndarray, axis: int, rank: int
) -> tuple[Value, Value | None]:
    """Scale and zero point arrays as constants that broadcast against a rank-`rank`
    tensor: scalars, or vectors along `axis`; no zero point when it is all zeros."""
    shape = [1] * rank
    if scales.size > 1:
        shape[axis] = scales.size
    scale = np.asarray(scales, np.float32).reshape(shape if scales.size > 1 else ())
    zero = np.asarray(zeros, np.float32).reshape(shape if zeros.size > 1 else ())
    return builder.constant(scale), (builder.constant(zero) if zero.any() else None)

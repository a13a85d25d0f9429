"""Neural-network ops: dense/matmul, normalisations, softmax and LRN, plus (imported
from their own modules) convolution, pooling and resize.

Floating-point references compute in float64 and round once to the output dtype, so
they do not depend on a summation order (see `ember.graph.ops.conv`); compiled code
is compared against them within the test tolerances.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Imported for their side effect: they register conv, conv_transpose, the pools, resize.
import ember.graph.ops.conv
import ember.graph.ops.pool
import ember.graph.ops.resize  # noqa: F401
from ember.errors import ShapeError
from ember.graph.ir import FLOAT_DTYPES, Attrs, NoAttrs, TensorType
from ember.graph.ops.attrs import (
    AxisAttrs,
    BatchNormAttrs,
    InstanceNormAttrs,
    LayerNormAttrs,
    LrnAttrs,
)
from ember.graph.ops.conv import accumulation_dtype
from ember.graph.ops.layout import parse_data_layout
from ember.graph.ops.math import broadcast_shapes
from ember.graph.ops.registry import (
    InferFn,
    MacsFn,
    OpDef,
    OpPattern,
    ReferenceFn,
    register_op,
)


def _check_same_float(op: str, *types: TensorType) -> None:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ShapeError(f"{op}: operand dtypes differ ({', '.join(t.dtype for t in types)})")
    if types[0].dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{op}: needs floating-point operands, got {types[0].dtype}")


def _check_axis(op: str, axis: int, data: TensorType) -> None:
    if not 0 <= axis < data.ndim:
        raise ShapeError(f"{op}: axis {axis} is out of range for {data} (0..{data.ndim - 1})")


# -- dense and matmul ---------------------------------------------------------------


def _dense_infer(inputs: Sequence[TensorType], attrs: NoAttrs) -> tuple[TensorType, ...]:
    x, weight = inputs
    _check_same_float("dense", x, weight)
    if x.ndim < 1 or weight.ndim != 2 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(
            f"dense: x {x} and weight {weight} do not fit; dense takes x[..., K] and a "
            "weight[N, K] (stored transposed) and gives [..., N]"
        )
    return (TensorType((*x.shape[:-1], weight.shape[0]), x.dtype),)


def _dense_reference(inputs: Sequence[np.ndarray], attrs: NoAttrs) -> tuple[np.ndarray, ...]:
    x, weight = inputs
    accumulate = accumulation_dtype(x.dtype)
    return ((x.astype(accumulate) @ weight.T.astype(accumulate)).astype(x.dtype),)


def _dense_macs(inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: NoAttrs) -> int:
    return outputs[0].size * inputs[0].shape[-1]


_MATMUL_DTYPES = (*FLOAT_DTYPES, "int32", "int64", "uint32", "uint64")


def _matmul_infer(inputs: Sequence[TensorType], attrs: NoAttrs) -> tuple[TensorType, ...]:
    a, b = inputs
    if a.dtype != b.dtype or a.dtype not in _MATMUL_DTYPES:
        raise ShapeError(
            f"matmul: operands must share one of {', '.join(_MATMUL_DTYPES)}; got "
            f"{a.dtype} and {b.dtype}"
        )
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must have rank >= 1, got {a} and {b}")
    # NumPy semantics: a 1-D operand is a row (left) or a column (right) vector whose
    # extra axis is dropped from the result.
    a_shape = (1, *a.shape) if a.ndim == 1 else a.shape
    b_shape = (*b.shape, 1) if b.ndim == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(
            f"matmul: inner dimensions differ: {a} has {a_shape[-1]} columns, "
            f"{b} has {b_shape[-2]} rows"
        )
    batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    rows = (a_shape[-2],) if a.ndim > 1 else ()
    columns = (b_shape[-1],) if b.ndim > 1 else ()
    return (TensorType((*batch, *rows, *columns), a.dtype),)


def _matmul_reference(inputs: Sequence[np.ndarray], attrs: NoAttrs) -> tuple[np.ndarray, ...]:
    a, b = inputs
    accumulate = accumulation_dtype(a.dtype)
    return (np.matmul(a.astype(accumulate), b.astype(accumulate)).astype(a.dtype),)


def _matmul_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: NoAttrs
) -> int:
    # Every output element is a dot product over the shared inner dimension.
    return outputs[0].size * inputs[0].shape[-1]


# -- normalisations -----------------------------------------------------------------


def _batch_norm_infer(
    inputs: Sequence[TensorType], attrs: BatchNormAttrs
) -> tuple[TensorType, ...]:
    x, *vectors = inputs
    _check_same_float("batch_norm", *inputs)
    _check_axis("batch_norm", attrs.axis, x)
    channels = x.shape[attrs.axis]
    for name, vector in zip(("scale", "bias", "mean", "var"), vectors, strict=True):
        if vector.shape != (channels,):
            raise ShapeError(
                f"batch_norm: {name} is {vector} but x {x} has {channels} channels on "
                f"axis {attrs.axis}; it must have shape ({channels},)"
            )
    return (x,)


def _along_axis(vector: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """Reshape a vector so that it broadcasts along `axis` of a rank-`ndim` tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return vector.astype(np.float64).reshape(shape)


def _batch_norm_reference(
    inputs: Sequence[np.ndarray], attrs: BatchNormAttrs
) -> tuple[np.ndarray, ...]:
    x, scale, bias, mean, var = inputs
    scale, bias, mean, var = (_along_axis(v, attrs.axis, x.ndim) for v in (scale, bias, mean, var))
    normalised = (x.astype(np.float64) - mean) / np.sqrt(var + attrs.epsilon)
    return ((normalised * scale + bias).astype(x.dtype),)


def _normalise(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    """(x - mean) / sqrt(variance + epsilon) over `axes`, in float64."""
    wide = x.astype(np.float64)
    mean = wide.mean(axis=axes, keepdims=True)
    variance = np.square(wide - mean).mean(axis=axes, keepdims=True)
    return (wide - mean) / np.sqrt(variance + epsilon)


def _instance_norm_infer(
    inputs: Sequence[TensorType], attrs: InstanceNormAttrs
) -> tuple[TensorType, ...]:
    x, scale, bias = inputs
    _check_same_float("instance_norm", *inputs)
    layout = parse_data_layout(attrs.layout, "instance_norm", x.ndim)
    channels = x.shape[layout.channel_axis]
    if scale.shape != (channels,) or bias.shape != (channels,):
        raise ShapeError(
            f"instance_norm: scale {scale} and bias {bias} must both have shape "
            f"({channels},), the channel count of x {x} ({attrs.layout})"
        )
    return (x,)


def _instance_norm_reference(
    inputs: Sequence[np.ndarray], attrs: InstanceNormAttrs
) -> tuple[np.ndarray, ...]:
    x, scale, bias = inputs
    layout = parse_data_layout(attrs.layout, "instance_norm")
    normalised = _normalise(x, layout.spatial_axes, attrs.epsilon)
    channel = layout.channel_axis
    result = normalised * _along_axis(scale, channel, x.ndim) + _along_axis(bias, channel, x.ndim)
    return (result.astype(x.dtype),)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts to `target` without changing it (NumPy rules)."""
    if len(shape) > len(target):
        return False
    return all(d in (1, t) for d, t in zip(reversed(shape), reversed(target), strict=False))


def _layer_norm_infer(
    inputs: Sequence[TensorType], attrs: LayerNormAttrs
) -> tuple[TensorType, ...]:
    x, scale, bias = inputs
    _check_same_float("layer_norm", *inputs)
    _check_axis("layer_norm", attrs.axis, x)
    normalised_shape = x.shape[attrs.axis :]
    for name, operand in (("scale", scale), ("bias", bias)):
        if not _broadcasts_to(operand.shape, normalised_shape):
            raise ShapeError(
                f"layer_norm: {name} {operand} does not broadcast to the normalised axes "
                f"{normalised_shape} of x {x} (axis {attrs.axis})"
            )
    return (x,)


def _layer_norm_reference(
    inputs: Sequence[np.ndarray], attrs: LayerNormAttrs
) -> tuple[np.ndarray, ...]:
    x, scale, bias = inputs
    axes = tuple(range(attrs.axis, x.ndim))
    normalised = _normalise(x, axes, attrs.epsilon)
    result = normalised * scale.astype(np.float64) + bias.astype(np.float64)
    return (result.astype(x.dtype),)


def _lrn_infer(inputs: Sequence[TensorType], attrs: LrnAttrs) -> tuple[TensorType, ...]:
    (x,) = inputs
    _check_same_float("lrn", x)
    if x.ndim < 3:
        raise ShapeError(f"lrn: x {x} must have rank >= 3 (N, C, spatial...)")
    if attrs.size < 1:
        raise ShapeError(f"lrn: size must be >= 1, got {attrs.size}")
    return (x,)


def lrn_window(size: int, channels: int) -> tuple[int, int]:
    """How many channels before and after channel c its sum of squares reads: c -
    floor((size-1)/2) .. c + ceil((size-1)/2), each side cut at channels - 1 (beyond, it
    reads only the zero padding; a `size` of 2**62 is legal ONNX)."""
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    return min(before, max(channels - 1, 0)), min(after, max(channels - 1, 0))


def _lrn_reference(inputs: Sequence[np.ndarray], attrs: LrnAttrs) -> tuple[np.ndarray, ...]:
    (x,) = inputs
    if x.size == 0:  # the loop below runs per channel, and an empty x may have 2**31
        return (x.copy(),)
    wide = x.astype(np.float64)
    channels = x.shape[1]
    before, after = lrn_window(attrs.size, channels)
    squares = np.pad(np.square(wide), [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    sums = sum(squares[:, offset : offset + channels] for offset in range(before + after + 1))
    result = wide / (attrs.bias + attrs.alpha / attrs.size * sums) ** attrs.beta
    return (result.astype(x.dtype),)


# -- softmax ------------------------------------------------------------------------


def _softmax_infer(inputs: Sequence[TensorType], attrs: AxisAttrs) -> tuple[TensorType, ...]:
    (x,) = inputs
    _check_same_float("softmax", x)
    _check_axis("softmax", attrs.axis, x)
    return (x,)


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    # Subtracting the maximum keeps exp from overflowing; it cancels out of the result.
    # The initial value lets an empty tensor through (its result is empty too).
    wide = x.astype(np.float64)
    return wide - wide.max(axis=axis, keepdims=True, initial=-np.inf)


def _softmax_reference(inputs: Sequence[np.ndarray], attrs: AxisAttrs) -> tuple[np.ndarray, ...]:
    exp = np.exp(_shifted(inputs[0], attrs.axis))
    return ((exp / exp.sum(axis=attrs.axis, keepdims=True)).astype(inputs[0].dtype),)


def _log_softmax_reference(
    inputs: Sequence[np.ndarray], attrs: AxisAttrs
) -> tuple[np.ndarray, ...]:
    shifted = _shifted(inputs[0], attrs.axis)
    with np.errstate(divide="ignore"):  # log(0) of an empty axis: never in the result
        log_sum = np.log(np.exp(shifted).sum(axis=attrs.axis, keepdims=True))
    return ((shifted - log_sum).astype(inputs[0].dtype),)


def _register_all() -> None:
    anchors_with_macs: list[tuple[str, InferFn, ReferenceFn, MacsFn, str]] = [
        ("dense", _dense_infer, _dense_reference, _dense_macs, "x[..., K] @ weight[N, K].T"),
        ("matmul", _matmul_infer, _matmul_reference, _matmul_macs, "numpy.matmul semantics"),
    ]
    for name, infer, reference, macs, doc in anchors_with_macs:
        register_op(
            OpDef(
                name,
                OpPattern.ANCHOR,
                infer,
                reference,
                min_inputs=2,
                max_inputs=2,
                macs=macs,
                counts_macs=True,
                doc=doc,
            )
        )
    register_op(
        OpDef(
            "batch_norm",
            OpPattern.BROADCAST,
            _batch_norm_infer,
            _batch_norm_reference,
            attrs_type=BatchNormAttrs,
            min_inputs=5,
            max_inputs=5,
            doc="Inference batch norm (x, scale, bias, mean, var) along `axis`.",
        )
    )
    normalisations: list[tuple[str, InferFn, ReferenceFn, type[Attrs]]] = [
        ("instance_norm", _instance_norm_infer, _instance_norm_reference, InstanceNormAttrs),
        ("layer_norm", _layer_norm_infer, _layer_norm_reference, LayerNormAttrs),
    ]
    for name, infer, reference, attrs_type in normalisations:
        register_op(
            OpDef(
                name,
                OpPattern.ANCHOR,
                infer,
                reference,
                attrs_type=attrs_type,
                min_inputs=3,
                max_inputs=3,
                doc=f"{name} (x, scale, bias).",
            )
        )
    single_input: list[tuple[str, InferFn, ReferenceFn, type[Attrs]]] = [
        ("softmax", _softmax_infer, _softmax_reference, AxisAttrs),
        ("log_softmax", _softmax_infer, _log_softmax_reference, AxisAttrs),
        ("lrn", _lrn_infer, _lrn_reference, LrnAttrs),
    ]
    for name, infer, reference, attrs_type in single_input:
        register_op(OpDef(name, OpPattern.ANCHOR, infer, reference, attrs_type=attrs_type))


_register_all()

# LrnAttrs used to live here; other modules still import it from this one.
__all__ = ["LrnAttrs"]
